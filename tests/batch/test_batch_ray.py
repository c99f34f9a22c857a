"""`convert batch --ray ADDRESS` on a local Ray instance the test starts (2 CPUs): the same table as the pool."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from batch_helpers import KILLED, ROOT, kill_once, run_cli, write_zoo

from convert.batch import ERROR, PASS, load_manifest

ray = pytest.importorskip("ray")

MANIFEST = """\
output = "out"

[[models]]
name = "cnn"
route = "onnx:onnx"
files = "cnn.onnx"

[[models]]
name = "simple-caffe"
route = "onnx:caffe"
files = "simple.onnx"

[[models]]
name = "missing"
route = "onnx:onnx"
files = "no-such-model.onnx"

[[models]]
name = "tight"
route = "onnx:caffe"
files = "simple.onnx"
tol = 1e-12
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    # Workers of this driver import this checkout and the tests' helpers (kill_once) by path.
    path = ":".join(str(p) for p in (ROOT, ROOT / "tests", ROOT / "tests" / "batch"))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": path}})
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def _table(report: Path) -> list[tuple[object, ...]]:
    data = json.loads(report.read_text())
    return [(m["name"], m["route"], m["verdict"], None if m["worst_error"] is None else f"{m['worst_error']:.2g}",
             m["error"]) for m in data["models"]]


def test_ray_gives_the_same_table_as_the_local_pool(cluster: str, tmp_path: Path) -> None:
    write_zoo(tmp_path, MANIFEST)
    local = run_cli("batch", "models.toml", "-j", "2", "-o", "local", "--report", "local.json", cwd=tmp_path)
    assert local.returncode == 2, local.stderr
    on_ray = run_cli("batch", "models.toml", "--ray", cluster, "-o", "ray", "--report", "ray.json",
                     "--junit", "ray.xml", cwd=tmp_path)
    assert on_ray.returncode == 2, on_ray.stderr
    rows = _table(tmp_path / "ray.json")
    assert rows == _table(tmp_path / "local.json")
    assert [r[2] for r in rows] == ["PASS", "PASS", "ERROR", "FAIL"]
    assert "no-such-model.onnx: no such file" in str(rows[2][4])  # a failed row, not a crashed run
    data = json.loads((tmp_path / "ray.json").read_text())
    assert data["runner"] == {"kind": "ray", "address": cluster}
    assert all(m["worker"] for m in data["models"]) and all(m["peak_rss_bytes"] > 0 for m in data["models"])
    assert on_ray.stdout.splitlines()[-1].endswith(f"| Ray {cluster}")
    assert (tmp_path / "ray" / "simple-caffe" / "simple.caffemodel").exists()
    # the table as printed, less the time and peak RSS columns
    def cells(text: str) -> list[list[str]]:
        return [line.split()[:4] for line in text.splitlines()[2:6]]

    assert cells(on_ray.stdout) == cells(local.stdout)


def test_ray_worker_killed_is_retried_once_and_reported(cluster: str, tmp_path: Path) -> None:
    from convert.batch.ray_runner import run_ray

    manifest = load_manifest(write_zoo(tmp_path, KILLED))
    cnn, always = run_ray(manifest.models, tmp_path / "out", address=cluster, work=kill_once)
    assert (cnn.verdict, cnn.attempts) == (PASS, 2)  # its first Ray worker was killed; converted on the retry
    assert cnn.retry_reason == "its Ray worker died (WorkerCrashedError) while converting"
    assert (always.verdict, always.attempts) == (ERROR, 2)
    assert always.error.endswith("while converting, and again on the retry")


def test_no_cluster_at_the_address_is_a_usage_error(tmp_path: Path) -> None:
    write_zoo(tmp_path, KILLED)
    r = run_cli("batch", "models.toml", "--ray", "127.0.0.1:1", cwd=tmp_path)  # nothing listens on port 1
    assert r.returncode == 2
    assert "--ray 127.0.0.1:1: no Ray cluster answers there" in r.stderr
