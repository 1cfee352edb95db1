"""The stages' thread count: one per physical core (kokoro_ext.run.threads), on simulated hosts."""

from pathlib import Path

import pytest

from kokoro_ext.run.threads import configure_thread_pool, physical_cores


def topology(root: Path, cores: list[tuple[int, int]]) -> Path:
    """A sysfs cpu/ tree where CPU i is (package, core) ``cores[i]``."""
    for cpu, (package, core) in enumerate(cores):
        d = root / f"cpu{cpu}" / "topology"
        d.mkdir(parents=True)
        (d / "physical_package_id").write_text(f"{package}\n")
        (d / "core_id").write_text(f"{core}\n")
    return root


def test_vcpus_that_are_cores_count_each(tmp_path):
    # the AMD EPYC guests: 2 vCPUs, 1 thread per core (TVM's default would take 1)
    assert physical_cores([0, 1], topology(tmp_path, [(0, 0), (0, 1)])) == 2


def test_hyperthreads_of_one_core_count_once(tmp_path):
    root = topology(tmp_path, [(0, 0), (0, 0), (0, 1), (0, 1)])
    assert physical_cores([0, 1, 2, 3], root) == 2
    assert physical_cores([0, 1], root) == 1  # affinity limited to one core's two threads


def test_cores_of_two_packages_are_distinct(tmp_path):
    assert physical_cores([0, 1], topology(tmp_path, [(0, 0), (1, 0)])) == 2


def test_no_topology_counts_every_cpu(tmp_path):
    assert physical_cores([0, 1, 2], tmp_path) == 3


def test_this_host_has_at_least_one_core():
    assert physical_cores() >= 1


@pytest.mark.parametrize("setting", ["TVM_NUM_THREADS", "OMP_NUM_THREADS"])
def test_the_users_setting_stands(setting):
    environ = {setting: "3"}
    assert configure_thread_pool(environ) is None
    assert environ == {setting: "3"}


def test_sets_tvm_num_threads_to_the_cores():
    environ: dict[str, str] = {}
    n = configure_thread_pool(environ)
    assert n == physical_cores() and environ == {"TVM_NUM_THREADS": str(n)}
