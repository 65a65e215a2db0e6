"""基准的守门：忙的机器上拒绝写出结果（用人为的负载测，时间有界）；与 transformers 的对照。
测试从不计时：这里只看基准的判断与结构，不看速度数字。"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from gptcourse import machine
from gptcourse.config import preset
from gptcourse.model import GPT
from gptcourse.tokenizer import CharTokenizer
from gptcourse_kit.bench import peer
from gptcourse_kit.bench.__main__ import main as bench_main
from gptcourse_kit.bench.report import markdown


def snap(share=0.0, load=0.0, cores=2):
    return {"time": "t", "load_average": [load, load, load], "other_cpu_share": share,
            "cores": cores, "torch_threads": 1}


def test_busy_reasons():
    assert machine.busy_reasons([snap(), snap()], [100.0, 95.0]) == []
    assert "别的进程" in machine.busy_reasons([snap(share=0.5)], [])[0]
    assert "负载平均" in machine.busy_reasons([snap(load=1.0)], [])[0]
    assert "低 20%" in machine.busy_reasons([snap()], [100.0, 80.0, 80.0])[0]
    assert machine.busy_reasons([snap()], [100.0, 88.0]) == []      # 宿主的噪声（11 %）不算忙
    assert machine.busy_reasons([snap()], [100.0, 97.0, 75.0, 99.0]) == []   # 一次抖动不算忙


def test_busy_reasons_counts_host_steal():
    a, b = snap(), snap()
    a["steal_jiffies"], b["steal_jiffies"] = (100, 10_000), (150, 11_000)      # 5 %：还行
    assert machine.busy_reasons([a, b], []) == []
    b["steal_jiffies"] = (200, 11_000)                                         # 10 %：忙
    assert "steal" in machine.busy_reasons([a, b], [])[0]
    assert machine.steal_share(None, b["steal_jiffies"]) is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="读 /proc：只在 Linux 上")
def test_steal_jiffies_reads_proc():
    steal, total = machine.steal_jiffies()
    assert 0 <= steal <= total and total > 0


@pytest.fixture
def artificial_load():
    """每个核一个死循环的进程（测试结束就杀掉）。"""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
             for _ in range(machine.os.cpu_count() or 1)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="读 /proc：只在 Linux 上")
def test_bench_refuses_a_busy_machine(artificial_load, tmp_path, capsys):
    assert machine.other_cpu_share(0.5) > machine.MAX_OTHER_SHARE
    out = tmp_path / "benchmarks.json"
    assert bench_main(["--quick", "--out", str(out)]) == 3
    assert "机器不安静" in capsys.readouterr().err
    assert not out.exists() and not out.with_suffix(".md").exists()


def test_a_busy_report_says_so_everywhere():
    text = markdown({"machine": {}, "quiet": {"before": snap(share=0.5), "after": snap(),
                                              "busy": ["别的进程用掉了 50%"]}})
    assert "机器忙" in text and "别的进程用掉了 50%" in text


def test_physical_limits_are_positive():
    lim = machine.limits(quick=True)
    assert lim["fp32"]["gflops"] > 0 and lim["bf16"]["gflops"] > 0 and lim["memory"]["gb_s"] > 0


@pytest.fixture(scope="module")
def tiny_llama_pair():
    tok = CharTokenizer.from_text("\n春风吹绿江南岸，明月何时照我还。")
    torch.manual_seed(0)
    model = GPT(preset("course", vocab_size=tok.vocab_size, block_size=32, n_layer=2,
                       n_head=2, n_embd=32)).eval()
    return model, tok


def test_peer_converts_and_decodes_the_same_tokens(tiny_llama_pair):
    pytest.importorskip("transformers", reason="可选依赖 transformers（.[bench]）没有安装")
    model, tok = tiny_llama_pair
    hf = peer.to_llama(model, tok)
    assert hf.logit_gap < 1e-4
    r = peer.greedy_pair(model, tok, hf, ["春", "明"], rounds=1)
    assert r["tokens"] > 2 and set(r) >= {"ours", "transformers", "speedup"}


def test_peer_row_is_skipped_with_a_message_without_transformers(tiny_llama_pair, monkeypatch,
                                                                 capsys):
    from gptcourse_kit.bench import generation
    monkeypatch.setattr(peer, "available", lambda: False)
    model, tok = tiny_llama_pair
    assert generation.peer_row(model, tok, quick=True) == {"skipped": "transformers 没有安装"}
    assert "跳过" in capsys.readouterr().out


def test_load_average_after_the_start_includes_the_bench_itself():
    """负载平均只在开始前判断（之后里面有基准自己）；别的进程的占比每次都判断。"""
    assert machine.busy_reasons([snap(), snap(load=1.2)], []) == []
    assert machine.busy_reasons([snap(), snap(share=0.5)], [])


def test_cache_holding_names_the_smallest_level_that_fits():
    levels = [{"level": 1, "type": "Data", "bytes": 48 * 2**10, "shared_cpus": "0"},
              {"level": 2, "type": "Unified", "bytes": 2 * 2**20, "shared_cpus": "0"},
              {"level": 3, "type": "Unified", "bytes": 105 * 2**20, "shared_cpus": "0-1"}]
    assert machine.cache_holding(19_600_000, levels).startswith("L3")
    assert machine.cache_holding(1_000_000, levels).startswith("L2")
    assert machine.cache_holding(200 * 2**20, levels) == "内存（DRAM）"


def test_quick_mode_does_not_touch_the_committed_results(monkeypatch, tmp_path):
    """--quick 不加 --write 时写到临时目录，docs/benchmarks.json 不变。"""
    from gptcourse_kit.bench import __main__ as bench
    monkeypatch.setattr(bench, "busy_reasons", lambda *a: [])
    monkeypatch.setattr(bench, "snapshot", lambda: snap())
    monkeypatch.setattr(bench, "limits", lambda q: {"fp32": {"gflops": 1.0, "n": 8}})
    monkeypatch.setattr(bench, "matmul_ceiling", lambda n, r: {"gflops": 1.0})
    monkeypatch.setattr(bench, "markdown", lambda r: "")
    monkeypatch.setattr(bench.importlib, "import_module",
                        lambda *a: type("M", (), {"run": staticmethod(lambda quick: {})}))
    monkeypatch.setattr(bench.tempfile, "gettempdir", lambda: str(tmp_path))
    docs = bench.ROOT / "docs" / "benchmarks.json"
    before = docs.read_bytes()
    assert bench.main(["--quick"]) == 0
    assert docs.read_bytes() == before
    assert (tmp_path / "gptcourse-bench" / "benchmarks.json").exists()


def test_arrival_is_the_first_snapshot_at_or_below_the_target():
    from gptcourse_kit.bench.target import arrival
    rows = [{"wall_s": 10, "val": 4.9}, {"wall_s": 20, "val": 4.6}, {"wall_s": 30, "val": 4.4}]
    assert arrival(rows, 4.60) == 20 and arrival(rows, 4.50) == 30 and arrival(rows, 4.3) is None


def test_time_to_target_runs_the_shipped_recipe_and_reports_it(capsys):
    """快速模式：发布配方（换成 mini、4 步）带快照训练、参照循环、表格与 Markdown 都走一遍。"""
    from gptcourse_kit.bench import report, target
    assert "--aux" in target.recipe() and "--titled" in target.recipe()   # 读的是发布的命令
    r = target.run(quick=True)
    assert [row["step"] for row in r["release"]["rows"]] == [2, 4]         # 每次评估一份快照
    assert all(row["wall_s"] > 0 and row["val"] > 0 for row in r["release"]["rows"])
    assert r["reference"]["rows"] and [t["target"] for t in r["table"]] == [4.60, 4.50]
    md = report.markdown({"target": r, "machine": {}, "limits": {}})
    assert "发布配方训练到目标损失的时间" in md and "参照 ÷ 发布配方" in md
    assert "还没有量过" in report.markdown({"machine": {}, "limits": {}})


def test_markdown_names_the_run_of_each_section():
    """--only 分几次跑时，docs/benchmarks.md 写明每一节来自哪一次运行（开始时间与安静程度）。"""
    from gptcourse.runtime import ROOT
    from gptcourse_kit.bench.report import markdown

    r = json.loads((ROOT / "docs" / "benchmarks.json").read_text(encoding="utf-8"))
    starts = {run["quiet"]["before"]["time"] for run in r["runs"].values()}
    text = markdown(r)
    assert all(f"开始 {s}" in text for s in starts)
    if len(starts) > 1:
        assert "合并了几次运行" in text
    r["runs"] = {k: v | {"quiet": r["runs"]["training"]["quiet"]} for k, v in r["runs"].items()}
    assert "合并了几次运行" not in markdown(r)                      # 一次运行：不用逐节说明


@pytest.mark.parametrize("make, message", [
    (lambda p: p.write_text("{ 坏了", encoding="utf-8"), "读不出来"),
    (lambda p: p.mkdir(), "是目录"),
    (lambda p: p.write_text("[]", encoding="utf-8"), "不是一个 JSON 对象"),
])
def test_only_with_an_unreadable_previous_out_is_one_line_before_measuring(
        tmp_path, capsys, monkeypatch, make, message):
    """R14（B03–B05）：--only 要并进去的上次结果读不出——测量之前一行错误，退出码 2。"""
    import importlib
    bench_module = importlib.import_module("gptcourse_kit.bench.__main__")
    monkeypatch.setattr(bench_module, "snapshot", lambda: pytest.fail("不该开始测量"))
    out = tmp_path / "b.json"
    make(out)
    assert bench_module.main(["--only", "generation", "--allow-busy", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
