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
    assert set(row["checks"]) == {"noise", "sampling", "clipping", "steps", "divisor", "coverage", "weights"}
    assert set(row["checks"].values()) == {"pass"} and row["fail_lines"] == []
    assert (tmp_path / "privacy_card.json").is_file()


def _log_rows(path: Path) -> dict:
    """(model, mode) -> the ratio to non-private that bench_training.py printed in one GPU log."""
    rows = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 7 and parts[0] in ("gpt2-small", "smollm2-arch") and parts[1] == "full":
            rows[(parts[0], parts[2])] = (parts[4], parts[5], parts[6])
    return rows


def test_gpu_section_3_is_its_logs():
    """Section 3 of gpu.md (book-keeping batched over layers, H200): every ratio and peak in its table is the one
    its committed logs (reports/bench/gpu_wave5/) printed, invocation by invocation."""
    logs = BENCH / "gpu_wave5"
    runs = {(1, 16): ["run1_training_b16_1_profile.log", "run1_training_b16_2.log", "run1_training_b16_3.log"],
            (1, 128): ["run1_training_b128_1.log", "run1_training_b128_2.log"],
            (2, 16): ["run2_training_b16_1.log", "run2_training_b16_2.log", "run2_training_b16_3.log"],
            (2, 128): ["run2_training_b128_1.log"]}
    got = {k: [_log_rows(logs / f) for f in v] for k, v in runs.items()}
    md = (BENCH / "gpu.md").read_text().split("## 3.", 1)[1]
    models = {"GPT-2-small arch": "gpt2-small", "SmolLM2-135M arch": "smollm2-arch"}
    batch = model = None
    checked = 0
    for line in md.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 6 or not cells[2] or cells[2] in ("mode", "---"):
            continue
        batch = int(cells[0].split()[0]) if cells[0] else batch
        model = models.get(cells[1], model)
        mode = cells[2].replace("*", "").split()[0]
        for call, cell in ((1, cells[3]), (2, cells[4])):
            want = [x.strip().replace("*", "") for x in cell.split(",")]
            for inv, x in enumerate(want):
                if x in ("–", "") or not x[0].isdigit():
                    continue
                assert got[(call, batch)][inv][(model, mode)][0] == x, (call, batch, inv, model, mode)
                checked += 1
        peak, ratio = cells[5].replace("*", "").split()
        assert any(r[(model, mode)][1:] == (peak, ratio.strip("()"))
                   for (_, b), rows in got.items() if b == batch for r in rows if (model, mode) in r)
    assert checked >= 40
