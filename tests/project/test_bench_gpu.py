"""reports/bench/gpu.md is its raw rows (reports/bench/gpu_h100.json, written from the GPU run's logs), and the
probe's DDP benchmark it ran runs here too: the same script, on the CPU (gloo, one rank, a 2-layer Llama)."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "reports" / "bench"


def test_gpu_report_is_its_raw_rows():
    raw = json.loads((BENCH / "gpu_h100.json").read_text())
    md = (BENCH / "gpu.md").read_text()
    assert raw["machine"][1].split(",")[0] in md  # the card named
    for r in raw["probe_ddp"]:
        assert f"{r['plain_ms']:.1f} ms | {r['probe_ms']:.1f} ms | {r['ratio']:.3f} | {r['peak_gb']:.1f} |" in md
        assert set(r["checks"].values()) == {"pass"} and not r["fail_lines"] and not r["online_alarms"]
    for r in raw["training"]:
        assert f"{r['step_s']:.3f} |" in md and f"{r['peak_rss_gb']:.2f} |" in md, r


def test_bench_probe_ddp_runs_and_an_honest_run_passes(monkeypatch, capsys, tmp_path):
    spec = importlib.util.spec_from_file_location("bench_probe_ddp", ROOT / "benchmarks" / "bench_probe_ddp.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for k, v in dict(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)).items():
        monkeypatch.setenv(k, v)
    assert mod.main(["--model", "tiny-llama", "--trainable", "full", "--records", "400", "--rate", "0.05",
                     "--seq", "16", "--canaries", "100", "--out", str(tmp_path)]) == 0
    row = json.loads(capsys.readouterr().out.splitlines()[-1][len("JSON "):])
    assert row["steps"] == 20 and row["world"] == 1 and row["backend"] == "gloo"
    assert set(row["checks"]) == {"noise", "sampling", "clipping", "steps", "divisor", "coverage"}
    assert set(row["checks"].values()) == {"pass"} and row["fail_lines"] == []
    assert (tmp_path / "privacy_card.json").is_file()
