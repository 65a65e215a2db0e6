"""评分的沙箱与裁判：恶意作业（可靠性评审 §2a 的 A3–A17）只能影响它自己，而且伪造不了成绩。

一个小班一次评完（``--jobs 2``）：每份恶意作业把攻击写进第 1 题 ``count_pairs`` 的函数体（检查器
调用它时攻击就真的执行了），攻击被挡住时函数再返回正确答案——所以“第 1 题得分”就是“攻击被挡住”。
伪造成绩的作业（A13–A15）什么题都没做，应当 0 分。另有两个诚实的同学（全对 / 空白）看成绩是否被改。
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import nbformat
import pytest
from test_classroom import SOLVED_MERGE, SOLVED_PAIRS, teacher_nb

from gptcourse.runtime import ROOT
from gptcourse_kit.classroom import sandbox
from gptcourse_kit.classroom.__main__ import main
from gptcourse_kit.classroom.judge import clean_message, sanitize
from gptcourse_kit.classroom.student import student_notebook

WHY = sandbox.probe()
MARKER = f"4711{os.getpid()}"              # 恶意作业留下的子进程：sleep 4711<pid>（本测试独有）
# 空闲时最慢的一份诚实作业约 9 秒（启动沙箱、导入 torch 与课程包占大半）。时限按机器此刻有多忙
# 放宽（见 _slowdown）：负载平均 7 的两核机器上，3 秒的作业要 20 多秒，以前的固定 20 秒把被挡住
# 的攻击（A04–A08）也记成了“超时”。单元格时限总比整份作业的时限短：A03 证明的正是单元格时限
# 中断不了握着 GIL 的 C 循环，只能靠整份作业的时限杀掉沙箱。
TIMEOUT, CELL_TIMEOUT = 30, 10
MAX_SLOWDOWN = 6                           # 容器里的负载平均可能是整台宿主机的：放宽有上限

pytestmark = pytest.mark.slow


def _slowdown() -> float:
    """这台机器此刻大约比空闲时慢几倍：1 分钟负载平均 ÷ 能用的核数，在 [1, MAX_SLOWDOWN] 之间。"""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:                                    # macOS
        cores = os.cpu_count() or 1
    return min(MAX_SLOWDOWN, max(1.0, os.getloadavg()[0] / cores))


def _wait_until_empty(find, seconds: float = 30) -> list[str]:
    """反复调用 find()，直到它返回空列表或过了 seconds 秒：沙箱的 PID 命名空间里的进程由内核
    异步收尾，忙的机器上要多等一会儿（留下的 sleep 要睡 4711… 秒，等 30 秒不会放过它）。"""
    deadline = time.monotonic() + seconds
    while (found := find()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return found


def _require_sandbox() -> None:
    if WHY is None:
        return
    if os.environ.get("CI") == "true" and sys.platform.startswith("linux"):
        pytest.fail(f"CI 上必须能用沙箱（.ci/run 会安装 bubblewrap）：{WHY}")
    pytest.skip(f"本机没有可用的沙箱：{WHY}")


HONEST = SOLVED_PAIRS.split("\n", 1)[1]                     # 正确的函数体


def attack(probe: str) -> str:
    """第 1 题：先执行 probe（它设置 ok = 攻击被挡住），挡住了才返回正确答案。"""
    return ("def count_pairs(ids):\n" + textwrap.indent(textwrap.dedent(probe), "    ")
            + "\n    if not ok:\n        return {}\n" + HONEST)


def probes(d: Path, port: int) -> dict[str, str]:
    classmate = d / "2024002_空白.ipynb"
    return {
        # A3：握着 GIL 的 C 循环，单元格超时中断不了它，只能杀掉整个沙箱
        "A03": "ok = sum(range(10**12)) < 0",
        # A4：脱离会话的子进程（PID 命名空间随沙箱一起消失）
        "A04": f"""
            import subprocess
            if not getattr(count_pairs, "spawned", False):
                count_pairs.spawned = True
                for _ in range(30):
                    subprocess.Popen(["sleep", "{MARKER}"], start_new_session=True)
            ok = True""",
        # A5：申请 20 GiB 地址空间
        "A05": """
            import mmap
            try:
                mmap.mmap(-1, 20 << 30)
                ok = False
            except (OSError, MemoryError, ValueError):
                ok = True""",
        # A6 + A7：删掉作业目录里的文件、把同学的作业改成 {}
        "A06": f"""
            import os, glob
            hits = 0
            for p in glob.glob({str(d)!r} + "/*"):
                try:
                    os.remove(p)
                    hits += 1
                except OSError:
                    pass
            try:
                open({str(classmate)!r}, "w").write("{{}}")
                hits += 1
            except OSError:
                pass
            ok = hits == 0""",
        # A8：删掉 / 写入老师仓库里的文件
        "A08": """
            import gptcourse, pathlib
            root = pathlib.Path(gptcourse.__file__).parents[1]
            hits = 0
            for act in (lambda: (root / "CANARY.txt").write_text("x"),
                        lambda: (root / "pyproject.toml").unlink(),
                        lambda: (root / "gptcourse" / "model.py").write_text("")):
                try:
                    act()
                    hits += 1
                except OSError:
                    pass
            ok = hits == 0""",
        # A9：写到作业目录以外（/tmp 是沙箱私有的，不会落到真正的 /tmp）
        "A09": f"""
            import pathlib
            hits = 0
            for p in ("/etc/gptcourse-x", "/usr/gptcourse-x", "/root/gptcourse-x", "/gptcourse-x",
                      {str(d.parent / "outside.txt")!r}):
                try:
                    pathlib.Path(p).write_text("x")
                    hits += 1
                except OSError:
                    pass
            pathlib.Path("/tmp/gptcourse-hostile-{MARKER}").write_text("x")
            ok = hits == 0""",
        # A11 + A12：联网（TCP connect / connect_ex / UDP）——沙箱的网络命名空间里没有路由，
        # 连评分机自己 127.0.0.1 上正在监听的端口也连不上（那是另一个网络命名空间的 lo）
        "A11": f"""
            import socket
            blocked = 0
            probe = socket.socket()
            probe.settimeout(2)
            blocked += probe.connect_ex(("127.0.0.1", {port})) != 0
            try:
                socket.create_connection(("192.0.2.1", 80), timeout=2)
            except OSError:
                blocked += 1
            s = socket.socket()
            s.settimeout(2)
            blocked += s.connect_ex(("192.0.2.1", 9)) != 0
            u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                u.sendto(b"x", ("192.0.2.1", 9))
            except OSError:
                blocked += 1
            ok = blocked == 4""",
        # 进程数：fork 炸弹
        "NPROC": """
            import subprocess
            procs, ok = [], False
            try:
                for _ in range(300):
                    procs.append(subprocess.Popen(["sleep", "30"]))
            except OSError:
                ok = True
            for p in procs:
                p.kill()""",
        # A16：往老师的检查器源文件里追加一个“全对”的 results()
        "A16": """
            import gptcourse.check._common as c, pathlib
            p = pathlib.Path(c.__file__)
            try:
                p.write_text(p.read_text() + "\\ndef results():\\n    return []\\n")
                ok = False
            except OSError:
                ok = True""",
        # A17：沿 /proc 的父进程链往上，把评分进程和自己都 SIGKILL 掉
        "A17": """
            import os, signal
            pid = os.getppid()
            while pid > 1:
                try:
                    ppid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
                    os.kill(pid, signal.SIGKILL)
                except (OSError, ValueError, IndexError):
                    break
                pid = ppid
            os.kill(os.getpid(), signal.SIGKILL)
            ok = True""",
    }


# 伪造成绩：什么都没做，只想把结果改成“全对”（A13–A15），写在三个地方
FORGE_RECORD = """\
import gptcourse.check._common as _c
for _n in ("count_pairs", "merge_pair"):
    _c._record("nb01", _n, True, "正确")"""
FORGE_REPLACE = """\
import gptcourse.check as _chk, gptcourse.check._common as _c, gptcourse.check.nb01 as _nb
_secret = open("/etc/passwd").readline()
for _n in ("count_pairs", "merge_pair"):
    setattr(_nb, _n, lambda *a, **k: True)
    setattr(_chk, _n, lambda *a, **k: True)
    _c.RESULTS["nb01." + _n] = {"key": "nb01." + _n, "chapter": "nb01", "exercise": _n,
                                "passed": True, "message": _secret}
_c.results = lambda: list(_c.RESULTS.values())"""
FORGE_MARKER = """\
import json
_fake = [{"exercise": n, "passed": True, "message": "正确"} for n in ("count_pairs", "merge_pair")]
print("<<GPTCOURSE-RESULTS>>" + json.dumps(_fake))
_line = "<<GPTCOURSE-RESULTS>>" + json.dumps(_fake)
get_ipython().events.register("pre_run_cell", lambda *a: print(_line))"""
FORGE_CHANNEL = """\
def count_pairs(ids):
    import json, os, sys
    for n in ("merge_pair", "count_pairs"):
        line = {"exercise": n, "passed": True, "status": "正确", "message": "正确"}
        os.write(int(sys.argv[-1]), (json.dumps(line) + "\\n").encode())
    raise NotImplementedError("还没完成")"""


# 评审 H2 的四个伪造办法（classroom.md §3 的 蒋六、沈七、韩八、卫五），什么题都没做
FORGE_PIPE = """\
import json, os, sys
for n in ("count_pairs", "merge_pair"):
    line = {"exercise": n, "passed": True, "status": "正确", "message": "正确"}
    os.write(int(sys.argv[-1]), (json.dumps(line, ensure_ascii=False) + "\\n").encode())
os.write(int(sys.argv[-1]), b"DONE\\n")
os._exit(0)"""
FORGE_FRAMES = """\
import sys
f = sys._getframe()
while f is not None:
    judge = f.f_locals.get("self")
    if hasattr(judge, "checkers"):
        for k in list(judge.checkers):
            judge.checkers[k] = lambda *a, **kw: True
    f = f.f_back"""
FORGE_LEN = """\
def len(x):
    import gc as _gc
    for o in _gc.get_objects():
        if type(o).__name__ == "_Judge":
            for k in list(o.checkers):
                o.checkers[k] = lambda *a, **kw: True
    return 0


_ = len(0)"""
FORGE_PATCH_RECORD = """\
import gptcourse.check._common as _c
_c._record = lambda *a, **kw: True"""
FORGE_RESULTS = """\
import gptcourse.check._common as _c
_c.RESULTS = {"nb01." + n: {"key": "nb01." + n, "chapter": "nb01", "exercise": n,
                            "passed": True, "message": "正确"}
              for n in ("count_pairs", "merge_pair")}"""
# 任何继承来的文件描述符上都写伪造的行（包括裁判的套接字）
FORGE_FDS = """\
import json, os
for fd in sorted(int(f) for f in os.listdir("/proc/self/fd")):
    for n in ("count_pairs", "merge_pair"):
        line = {"exercise": n, "passed": True, "status": "正确", "message": "正确"}
        try:
            os.write(fd, ("0" * 64 + " " + json.dumps(line) + "\\n").encode())
        except OSError:
            pass"""
# 合乎协议的伪造：找到工作进程自己发帧的函数，替裁判发一条“正确”的判决
FORGE_PROTOCOL = """\
import gc as _gc
for o in _gc.get_objects():
    if type(o).__name__ == "_Worker":
        for n in ("count_pairs", "merge_pair"):
            o.send({"op": "verdict", "exercise": n, "passed": True, "status": "正确",
                    "message": "正确"})"""
# 找签名用的密钥（以前裁判在内存里有一把）：现在工作进程里没有任何密钥
FORGE_KEY = """\
import gc as _gc, os
found = [o for o in _gc.get_objects() if isinstance(o, dict) and isinstance(o.get("key"), str)
         and len(o["key"]) == 64]
found += [v for k, v in os.environ.items() if "KEY" in k.upper()]
found += [p for p in os.listdir(".") if p.endswith(".json")]
if found:
    return {(1, 2): 2, (2, 3): 1, (3, 1): 1}"""
# 返回一个 __eq__ 永远为真的对象（第 2 题；第 1 题没做）
FORGE_EQ = """\
def merge_pair(ids, pair, idx):
    class Equal:
        def __eq__(self, other):
            return True

        def __ne__(self, other):
            return False

        __hash__ = object.__hash__
    return Equal()"""


def _body_forge(code: str) -> str:
    """把伪造的语句放进第 1 题的函数体：检查器调用它时执行（之后照样是存根）。"""
    return ("def count_pairs(ids):\n" + textwrap.indent(code, "    ")
            + "\n    raise NotImplementedError('还没完成')")


def _tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if rel.parts[0] in (".git", ".venv", ".pytest_cache") or "__pycache__" in rel.parts:
            continue
        h.update(str(rel).encode())
        if p.is_file():
            h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def _survivors(scratch: Path) -> list[str]:
    """本测试自己启动的进程里还活着的：恶意作业留下的 sleep <MARKER>，或 spec 放在本测试的
    临时目录（scratch）下的工作进程和裁判进程。别的会话同时在评分，它们的进程不算。"""
    found = []
    for p in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (p / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        mine = cmd[:2] == [b"sleep", MARKER.encode()] or (
            (b"gptcourse_kit.classroom.judge" in cmd or b"gptcourse_kit.classroom.referee" in cmd)
            and any(a.startswith(str(scratch).encode()) for a in cmd))
        if mine:
            found.append(f"{p.name}: {b' '.join(cmd).decode(errors='replace')}")
    return found


@pytest.fixture(scope="module")
def hostile_class(tmp_path_factory):
    """评一个有 15 份作业的班：两个诚实的同学 + 每种攻击一份。"""
    _require_sandbox()
    d = tmp_path_factory.mktemp("class")
    ref = tmp_path_factory.mktemp("ref")
    nbformat.write(teacher_nb(), ref / "01_tiny.ipynb")
    blank = student_notebook(teacher_nb())
    subs = {"2024001_全对": teacher_nb(), "2024002_空白": blank}
    listener = socket.create_server(("127.0.0.1", 0))           # 沙箱外的一个本机端口
    for i, (case, probe) in enumerate(probes(d, listener.getsockname()[1]).items()):
        nb = student_notebook(teacher_nb())
        nb.cells[2].source = attack(probe)
        nb.cells[4].source = SOLVED_MERGE
        subs[f"31{i:02d}_{case}"] = nb
    forged = {"A13cell": ("extra", FORGE_RECORD), "A13top": ("top", FORGE_RECORD),
              "A13body": ("body", FORGE_RECORD), "A14cell": ("extra", FORGE_REPLACE),
              "A14body": ("body", FORGE_REPLACE), "A15cell": ("extra", FORGE_MARKER),
              "A15chan": ("chan", FORGE_CHANNEL), "H2pipe": ("body", FORGE_PIPE),
              "H2frames": ("body", FORGE_FRAMES), "H2len": ("chan", FORGE_LEN),
              "H2record": ("body", FORGE_PATCH_RECORD), "H2results": ("body", FORGE_RESULTS),
              "H2fds": ("body", FORGE_FDS), "H2proto": ("body", FORGE_PROTOCOL),
              "H2key": ("body", FORGE_KEY), "H2eq": ("merge", FORGE_EQ)}
    for i, (case, (where, code)) in enumerate(forged.items()):
        nb = student_notebook(teacher_nb())
        if where == "extra":
            nb.cells.insert(2, nbformat.v4.new_code_cell(code))
            nb.cells.append(nbformat.v4.new_code_cell(code))
        elif where == "top":
            nb.cells[2].source = code + "\n\n" + nb.cells[2].source
        elif where == "body":
            nb.cells[2].source = _body_forge(code)
        elif where == "merge":
            nb.cells[4].source = code
        else:
            nb.cells[2].source = code
        subs[f"41{i:02d}_{case}"] = nb
    for name, nb in subs.items():
        nbformat.write(nb, d / f"{name}.ipynb")
    before_files = {p.name: p.read_bytes() for p in d.iterdir()}
    before_repo = _tree_digest(ROOT)
    # 裁判的临时目录都放在这里（与作业目录不同级：它的上级在沙箱里是私有 /tmp 里新建的目录）
    scratch = Path(tempfile.mkdtemp(prefix=f"gptcourse-test-{os.getpid()}-"))
    slow = _slowdown()                                          # 在开始评分的这一刻量
    timeout, cell_timeout = round(TIMEOUT * slow), round(CELL_TIMEOUT * slow)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tempfile, "tempdir", str(scratch))
        rc = main(["grade", *(str(d / f"{n}.ipynb") for n in subs), "--reference", str(ref),
                   "--json", str(d.parent / "g.json"), "--jobs", "2",
                   "--timeout", str(timeout), "--cell-timeout", str(cell_timeout)])
    listener.close()
    shutil.rmtree(scratch, ignore_errors=True)
    assert rc == 0
    data = json.loads((d.parent / "g.json").read_text(encoding="utf-8"))
    by = {r["name"]: r for r in data}
    return {"by": by, "d": d, "scratch": scratch, "before_files": before_files,
            "before_repo": before_repo, "n": len(subs), "timeout": timeout}


def _passed(r: dict) -> dict[str, bool]:
    return {e["exercise"]: e["passed"] for e in r["exercises"]}


@pytest.mark.parametrize("case", ["A04", "A05", "A06", "A08", "A09", "A11", "NPROC", "A16"])
def test_attack_is_blocked_inside_the_sandbox(hostile_class, case):
    r = hostile_class["by"][case]
    assert _passed(r) == {"count_pairs": True, "merge_pair": True}, r


def test_gil_holding_c_loop_is_killed_at_the_deadline(hostile_class):
    r = hostile_class["by"]["A03"]
    assert _passed(r) == {"count_pairs": False, "merge_pair": False}
    assert r["error"].startswith(f"整份作业超过 {hostile_class['timeout']} 秒")
    assert {e["status"] for e in r["exercises"]} == {"超时"}


def test_killing_the_grader_only_zeroes_that_submission(hostile_class):
    r = hostile_class["by"]["A17"]
    assert r["score"] == 0 and "意外退出" in r["error"]
    assert hostile_class["by"]["全对"]["score"] == 2          # 评分进程活着，别人的成绩都在


@pytest.mark.parametrize("case", ["A13cell", "A13top", "A13body", "A14cell", "A15cell"])
def test_forged_submissions_score_zero(hostile_class, case):
    r = hostile_class["by"][case]
    assert r["score"] == 0, r
    assert not any("root:" in e["message"] for e in r["exercises"])
    assert {e["status"] for e in r["exercises"]} == {"未作答"}


@pytest.mark.parametrize("case", ["A15chan", "H2pipe", "H2fds", "H2proto"])
def test_lines_forged_on_the_judges_pipe_zero_the_submission(hostile_class, case):
    """写进裁判套接字（或任何继承来的文件描述符）的行不合协议，或是合乎格式却不该由工作进程
    发的判决：整份作业 0 分，备注说疑似伪造（以前 蒋六 20/20）。判决只由沙箱外的裁判进程写在
    它自己的标准输出上，工作进程碰不到。"""
    r = hostile_class["by"][case]
    assert r["score"] == 0 and "疑似伪造" in r["error"], r


@pytest.mark.parametrize("case", ["A14body", "H2frames", "H2record", "H2results"])
def test_tampering_during_a_check_zeroes_that_exercise_with_a_note(hostile_class, case):
    """检查中途改检查器模块（A14）、沿调用栈换掉裁判的检查器（沈七，以前 20/20）、改
    ``_common._record``（卫五，以前存根也得 ✓）：那一题 0 分并留下备注，下一题照常用真的检查器。"""
    r = hostile_class["by"][case]
    assert r["score"] == 0, r
    status = {e["exercise"]: e["status"] for e in r["exercises"]}
    assert status == {"count_pairs": "出错", "merge_pair": "未作答"}, r
    assert any("疑似伪造" in n for n in r["notes"]), r["notes"]


def test_there_is_no_key_to_find(hostile_class):
    """以前判决行靠一把密钥签名，密钥就在裁判（也就是学生的进程）的内存里。现在工作进程里没有
    密钥、环境变量里没有、作业目录里也没有 spec：函数找不到任何东西，照样是存根。"""
    r = hostile_class["by"]["H2key"]
    assert r["score"] == 0 and r["error"] is None, r
    assert {e["status"] for e in r["exercises"]} == {"未作答"}


def test_an_always_equal_result_is_not_trusted(hostile_class):
    """返回一个 ``__eq__`` 永远为真的对象：它不是数据，到裁判那里只是一个编号（Proxy），比较时
    不运行它的 ``__eq__``：那一题 0 分，备注说明。"""
    r = hostile_class["by"]["H2eq"]
    assert r["score"] == 0, r
    status = {e["exercise"]: e["status"] for e in r["exercises"]}
    assert status == {"count_pairs": "未作答", "merge_pair": "答案不对"}, r
    assert any("merge_pair" in n and "不调用它的 __eq__" in n for n in r["notes"]), r["notes"]


def test_every_verdict_comes_from_the_referee(hostile_class):
    """这个班运行过的每一道题都由沙箱外的裁判进程判（JSON 里 judged = referee；空白作业不运行）。"""
    judged = {n: {e["judged"] for e in r["exercises"]} for n, r in hostile_class["by"].items()}
    assert judged.pop("空白") == {"not-run"}
    assert set().union(*judged.values()) == {"referee"}


def test_shadowing_a_builtin_runs_nothing_at_definition_time(hostile_class):
    """``def len(x): …`` 加 ``_ = len(0)``（韩八，以前 18/20）：这个定义被拒绝，备注说明。"""
    r = hostile_class["by"]["H2len"]
    assert r["score"] == 0, r
    assert any("不能用 len 这个名字" in n for n in r["notes"]), r["notes"]


def test_honest_classmates_are_unaffected(hostile_class):
    by = hostile_class["by"]
    assert _passed(by["全对"]) == {"count_pairs": True, "merge_pair": True}
    assert _passed(by["空白"]) == {"count_pairs": False, "merge_pair": False}
    assert {e["status"] for e in by["空白"]["exercises"]} == {"未作答"}


def test_nothing_outside_the_scratch_copy_changed(hostile_class):
    d = hostile_class["d"]
    after = {p.name: p.read_bytes() for p in d.iterdir()}
    assert after == hostile_class["before_files"]
    assert _tree_digest(ROOT) == hostile_class["before_repo"]
    assert not (d.parent / "outside.txt").exists()
    assert not Path(f"/tmp/gptcourse-hostile-{MARKER}").exists()


def test_no_process_left_behind(hostile_class):
    """只看本测试自己启动的进程（别的会话可能同时在评分）：恶意作业留下的 30 个 sleep 和每个
    裁判都随沙箱消失；也没有一份作业因为别人超时而被拖成“超时”。"""
    assert _wait_until_empty(lambda: _survivors(hostile_class["scratch"])) == []
    slow = [n for n, r in hostile_class["by"].items()
            if (r["error"] or "").startswith("整份作业超过")]
    assert slow == ["A03"]


def test_sanitize_keeps_definitions_and_drops_statements():
    src = ("import math\nimport gptcourse.check._common as c\nimport os as math2\n"
           "V = 3000\nhidden = 64 * math.ceil(8 * V / 3 / 64)\nc._record('x', True, '正确')\n"
           "@torch.no_grad()\ndef f(x, y=2):\n    return x\n"
           "@(lambda g: c._record('x', True, '正确'))\ndef g():\n    pass\n"
           "def h(x=print('side effect')):\n    pass\n"
           "class M(nn.Module):\n    n = 3\n    def forward(self, x):\n        return x\n"
           "class Meta(object, metaclass=type):\n    pass\n"
           "for i in range(3):\n    pass\nimport torch as nn\nW = 1; c._record('x', True, '')\n")
    text, names, dropped, error, refused = sanitize(src)
    assert error is None and refused == []
    assert names == ["math", "math2", "V", "hidden", "f", "M", "W"]
    assert dropped == 8
    assert "_record" not in text and "print" not in text and "metaclass" not in text
    assert "@torch.no_grad()\ndef f(x, y=2):" in text                 # 装饰器保留
    assert sanitize("def f(:\n")[3].startswith("第 1 行语法错误")


def test_messages_come_from_the_checker_format():
    assert clean_message(True, "root:x:0:0") == "正确"
    assert clean_message(False, "root:x:0:0:root:/root:/bin/bash") == "还不对"
    assert clean_message(False, "还没完成：写 count_pairs") == "还没完成：写 count_pairs"
    assert clean_message(False, "还不对：" + "长" * 1000).endswith("…")
    assert len(clean_message(False, "还不对：" + "长" * 1000)) < 310


def test_only_the_course_parts_of_the_repo_are_mounted():
    """老师在仓库根目录下评分（F4）：沙箱只挂课程包、数据与文档，不挂仓库本身——别的章节的作业、
    旧成绩册、反馈页和 .git（里面有教师版的答案）都看不到。"""
    cmd = sandbox.bwrap_command(["true"], Path("/tmp/scratch"), hide=[ROOT / "作业"])
    binds = {cmd[j + 1] for j, a in enumerate(cmd) if a == "--ro-bind"}
    assert str(ROOT.resolve()) not in binds
    assert {str((ROOT / p).resolve()) for p in ("gptcourse", "data")} <= binds
    assert not any(b == str((ROOT / ".git").resolve()) or b.startswith(str(ROOT / "作业"))
                   for b in binds)
    assert cmd[cmd.index("--uid") + 1] == "65534" and "--unshare-all" in cmd


def test_the_repo_root_its_git_and_a_gradebook_are_invisible_inside_the_sandbox(tmp_path):
    """真的在沙箱里看一眼：仓库根目录下老师的成绩册、.git 都不在；课程包与检查点在。"""
    _require_sandbox()
    book = ROOT / "成绩册-沙箱测试.csv"
    book.write_text("学号,得分\n3001,20\n", encoding="utf-8")
    try:
        names = (".git", book.name, "gptcourse/model.py", "data/checkpoints/course.pt")
        probe = ("import os, sys; print([os.path.exists(os.path.join(sys.argv[1], p)) "
                 f"for p in {names!r}])")
        cmd = sandbox.bwrap_command([sys.executable, "-c", probe, str(ROOT)], tmp_path)
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert out.stdout.strip() == "[False, False, True, True]", out.stderr
    finally:
        book.unlink()


def test_a_repo_under_tmp_stays_visible_above_the_private_tmp(monkeypatch):
    """仓库克隆在 /tmp 下（CI 的干净检出就是这样）：私有 /tmp 之后再把它只读挂回来。"""
    fake = Path("/tmp/some-clone")
    monkeypatch.setattr(sandbox, "_readable_roots", lambda: ([Path("/usr"), fake], []))
    cmd = sandbox.bwrap_command(["true"], Path("/tmp/scratch"))
    tmp = cmd.index("/tmp", cmd.index("--tmpfs"))
    binds = [j for j, a in enumerate(cmd) if a == "--ro-bind" and cmd[j + 1] == str(fake)]
    assert binds and binds[0] > tmp

