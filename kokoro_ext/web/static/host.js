// The host steps of a synthesis between the stages, as kokoro_ext.run.pipeline does them
// in Python: the style row of a voice, durations, the token-to-frame alignment, and the
// harmonic source's noise (the draws torch's CPU generator makes after manual_seed, as
// cpp/src/noise.cc makes them).  Tensors are row-major typed arrays.

/** A voice pack: float32 [510, 1, 256], one style row per phoneme count. */
export const VOICE_ROWS = 510;
export const STYLE_WIDTH = 256;

/** The [1, 256] style row kokoro picks from `voice` for `phonemes` phonemes. */
export function voiceStyle(voice, phonemes) {
  if (voice.length !== VOICE_ROWS * STYLE_WIDTH) {
    throw new Error(`a voice pack has ${VOICE_ROWS * STYLE_WIDTH} values, this one ${voice.length}`);
  }
  const row = Math.min(Math.max(phonemes - 1, 0), VOICE_ROWS - 1);
  return voice.slice(row * STYLE_WIDTH, (row + 1) * STYLE_WIDTH);
}

/** Frames per token: the text stage's durations divided by `speed`, rounded half to
 * even, at least 1, as kokoro_ext.run.pipeline computes them: the division in float32
 * (numpy divides a float32 array by a Python float in float32). */
export function durations(predicted, speed = 1) {
  // numpy's round: half to even
  const roundHalfEven = (x) => {
    const r = Math.round(x);
    return Math.abs(x % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
  };
  return Int32Array.from(predicted, (d) => Math.max(roundHalfEven(Math.fround(d / speed)), 1));
}

/** values [C, N] -> [C, frames]: token n's column repeated for its durations[n] frames. */
export function align(values, channels, durations, frames) {
  const tokens = durations.length;
  if (values.length !== channels * tokens) {
    throw new Error(`align: ${values.length} values are not ${channels} x ${tokens}`);
  }
  const out = new Float32Array(channels * frames);
  for (let c = 0; c < channels; c++) {
    let frame = 0;
    for (let n = 0; n < tokens; n++) {
      out.fill(values[c * tokens + n], c * frames + frame, c * frames + frame + durations[n]);
      frame += durations[n];
    }
  }
  return out;
}

/** std::mt19937, the engine of torch's CPU generator. */
class MT19937 {
  constructor(seed) {
    this.state = new Uint32Array(624);
    this.state[0] = seed >>> 0;
    for (let i = 1; i < 624; i++) {
      const prev = this.state[i - 1] ^ (this.state[i - 1] >>> 30);
      this.state[i] = (Math.imul(1812433253, prev) + i) >>> 0;
    }
    this.index = 624;
  }

  #twist() {
    const s = this.state;
    for (let i = 0; i < 624; i++) {
      const y = (s[i] & 0x80000000) | (s[(i + 1) % 624] & 0x7fffffff);
      s[i] = s[(i + 397) % 624] ^ (y >>> 1) ^ (y & 1 ? 0x9908b0df : 0);
    }
    this.index = 0;
  }

  next() {
    if (this.index >= 624) this.#twist();
    let y = this.state[this.index++];
    y ^= y >>> 11;
    y ^= (y << 7) & 0x9d2c5680;
    y ^= (y << 15) & 0xefc60000;
    y ^= y >>> 18;
    return y >>> 0;
  }
}

/** A double in [0, 1) from two words, high first, low 53 bits: torch's uniform. */
function uniform53(high, low) {
  return ((high & 0x1fffff) * 4294967296 + low) / 9007199254740992;
}

/**
 * float32 [samples, harmonics]: the normal draws kokoro's SineGen makes after
 * torch.manual_seed(seed), for a batch of one.  torch draws the initial phases first
 * (one word each), then fills the [harmonics, samples] view in memory order by
 * Box-Muller pairs, r cos(theta) then r sin(theta).
 */
export function sourceNoise(seed, samples, harmonics) {
  const engine = new MT19937(seed);
  for (let h = 0; h < harmonics; h++) engine.next();
  const count = samples * harmonics;
  const out = new Float32Array(count);
  const store = (k, value) => {
    if (k < count) out[(k % samples) * harmonics + Math.floor(k / samples)] = value;
  };
  for (let k = 0; k < count; k += 2) {
    const u1 = uniform53(engine.next(), engine.next());
    const u2 = uniform53(engine.next(), engine.next());
    const r = Math.sqrt(-2 * Math.log1p(-u2));
    const theta = 2 * Math.PI * u1;
    store(k, r * Math.cos(theta));
    store(k + 1, r * Math.sin(theta));
  }
  return out;
}
