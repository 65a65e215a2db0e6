"""JupyterLab 里的实时演示：拖滑块、换层换头，图随之重画（笔记本 05 第 3 节、笔记本 02 第 10 节）。

    demo = gc.viz.live.sampling(model, tok, prompt="春风")      # 温度、top-k、top-p、种子四个滑块
    demo = gc.viz.live.attention(model, tok, text="白日依山尽，")  # 输入一句诗，选层、选头

两个函数都返回一个 ipywidgets 容器（放在单元格最后一行就显示出来）：上面是控件，中间是图，
下面是一行读数（最可能的字与它的概率、留下几个字、写出的诗 / 最受关注的字），以及这次更新用了
多少毫秒。画图用的就是静态图的函数（:func:`gptcourse.viz.generation.token_bars`、
:func:`gptcourse.viz.attention.plot_attention_grid`），算的就是网页演示的课堂接口算的
（:func:`gptcourse.generate.next_token_stages`、:func:`gptcourse.evaluate.text_attention`），
所以笔记本里的静态图、这里的活图和网页上的图是同一份计算。

**静态的样子。** 容器显示时除了控件，还附带一张当前设置下的 PNG（``image/png``）：不能运行控件的
地方——提交的笔记本、网页版课程、幻灯片、没有信任的笔记本——显示的就是这张静态图；在 JupyterLab
里运行这一格，看到的是能拖的版本。

需要 ipywidgets（课程的 ``live`` 附加依赖：``pip install -e ".[live]"``）；只在调用这两个函数时
才导入它，``import gptcourse`` 不需要它。
"""
from __future__ import annotations

import base64
import contextlib
import functools
import html
import io
import time
from collections.abc import Callable

import torch

from ..errors import UserError, is_real
from ..evaluate import text_attention
from ..generate import generate, next_token_stages
from .attention import plot_attention_grid
from .generation import token_bars

EXTRA = 'pip install -e ".[live]"'
MISSING = f"实时演示需要 ipywidgets：在仓库根目录运行 {EXTRA}（课程的 live 附加依赖）"
DPI = 100                                   # 活图的分辨率：够看清汉字，编码 PNG 也快
TOP = 15                                    # 条形图画前几名
MARGINS = dict(left=0.1, right=0.99, bottom=0.11, top=0.88)   # 条形图的边距（figsize 7.2×3.0）
# 滑块的范围：(最小, 最大, 步长)；top-k 的 0 表示不限，温度 0 是贪心
RANGES = {"temperature": (0.0, 2.0, 0.05), "top_k": (0, 100, 1), "top_p": (0.05, 1.0, 0.05),
          "seed": (0, 99, 1)}
LABELS = {"temperature": "温度 τ", "top_k": "top-k（0 = 不限）", "top_p": "top-p",
          "seed": "种子"}


def _ipywidgets():
    try:
        import ipywidgets
    except ImportError:
        raise ImportError(MISSING) from None
    return ipywidgets


def _check(name: str, value, integer: bool = False):
    """初始值必须落在滑块的范围里：超出就说清楚，而不是让滑块悄悄夹到边上。"""
    lo, hi, _ = RANGES[name]
    if not is_real(value) or (integer and int(value) != value) or not lo <= value <= hi:
        kind = "整数" if integer else "数"
        raise UserError(f"{name} 应是 {lo}…{hi} 之间的{kind}（滑块的范围），收到 {value!r}")
    return int(value) if integer else float(value)


@contextlib.contextmanager
def one_thread():
    """一帧里 PyTorch 只用一个线程，结束后恢复原来的线程数。

    每一帧的计算都很小（一次前向看下一个字、一个字一个字地写一首诗），多线程省不下时间，只添同步：
    机器上还有别的程序在跑时，两个线程互相等待，一帧会慢好几倍。"""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")   # 与笔记本内联图的保存方式相同
    return buf.getvalue()


def _label(piece: str) -> str:
    return "↵" if piece == "\n" else piece


# ---------------------------------------------------------------- 采样
def sampling_frame(model, tok, prompt: str = "春风", temperature: float = 0.8, top_k: int = 0,
                   top_p: float = 0.9, seed: int = 0, **verse) -> dict:
    """采样演示的一帧（不画图）：``stages`` 是 :func:`next_token_stages` 的各阶段 logits；
    ``shown`` 温度之后的分布 [V]（条形的高度）；``kept`` 经过 top-k、top-p 还留着的字 [V]（布尔，
    其余画成灰色）；``sample`` 真正抽样用的分布 [V]（截断后重新归一）；``poem`` 用同样的参数和种子
    写出的一首诗。``top_k=0`` 表示不限；``verse``：诗体等格式参数（``form="五绝"`` ……），
    与 :func:`gptcourse.generate.generate` 相同。参数不对 → UserError。"""
    k = int(top_k) or None
    kw = dict(temperature=temperature, top_k=k, top_p=top_p, **verse)
    stages = next_token_stages(model, tok, prompt, **kw)
    return {"prompt": prompt, "settings": {"temperature": temperature, "top_k": top_k,
                                           "top_p": top_p, "seed": seed},
            "stages": stages, "shown": stages["temperature"].softmax(-1),
            "kept": stages["top_p"].isfinite(), "sample": stages["top_p"].softmax(-1),
            "poem": generate(model, tok, prompt, seed=seed, **kw)}


def draw_sampling(frame: dict, tok, ax) -> None:
    """把一帧画进 ax：前 ``TOP`` 名的条形（灰色 = 被 top-k / top-p 去掉），与静态图同一个函数。"""
    s = frame["settings"]
    tau = f"{s['temperature']:g}" + ("（贪心）" if s["temperature"] == 0 else "")
    title = (f"「{frame['prompt']}」之后：τ = {tau}，"
             f"top-k = {s['top_k'] or '不限'}，top-p = {s['top_p']:g}（灰色：被截掉）")
    token_bars(frame["shown"], tok, k=TOP, ax=ax, kept=frame["kept"], title=title)


def _sampling_readout(frame: dict, tok) -> str:
    best = int(frame["sample"].argmax())
    kept = int(frame["kept"].sum())
    return (f"抽样时最可能的字「{html.escape(_label(tok.piece(best)))}」："
            f"{float(frame['sample'][best]):.1%}；留下 {kept:,} 个字（词表 {tok.vocab_size:,} 个）"
            f"<br>种子 {frame['settings']['seed']} 写出：<b>{html.escape(frame['poem'])}</b>")


def sampling(model, tok, prompt: str = "春风", *, temperature: float = 0.8, top_k: int = 0,
             top_p: float = 0.9, seed: int = 0, **verse):
    """温度、top-k、top-p、种子四个滑块和一个开头输入框 → 下一个字的条形图与一首诗，拖动时重画。

    返回 ipywidgets 容器（:class:`LiveDemo`）：``demo.controls["temperature"]`` 等是控件，
    ``demo.frame`` 是最近一帧（见 :func:`sampling_frame`），``demo.timings`` 是每次更新的秒数。"""
    w = _ipywidgets()
    values = {"temperature": _check("temperature", temperature),
              "top_k": _check("top_k", top_k, integer=True),
              "top_p": _check("top_p", top_p), "seed": _check("seed", seed, integer=True)}
    style = {"description_width": "9em"}
    controls = {"prompt": w.Text(value=prompt, description="开头", continuous_update=False,
                                 style=style)}
    for name, v in values.items():
        lo, hi, step = RANGES[name]
        slider = w.IntSlider if name in ("top_k", "seed") else w.FloatSlider
        controls[name] = slider(value=v, min=lo, max=hi, step=step, description=LABELS[name],
                                style=style, layout=w.Layout(width="32em"))

    def frame(v: dict):
        return sampling_frame(model, tok, v["prompt"], v["temperature"], v["top_k"], v["top_p"],
                              v["seed"], **verse)

    def draw(f: dict, fig) -> None:              # 边距固定（不每次重排版：每帧省几十毫秒）
        draw_sampling(f, tok, fig.subplots(gridspec_kw=MARGINS))

    return _demo_class()(controls, frame, draw, lambda f: _sampling_readout(f, tok),
                         figsize=(7.2, 3.0),
                         what="采样：温度、top-k、top-p、种子")


# ---------------------------------------------------------------- 注意力
def attention_frame(model, tok, text: str, layer: int = 0, head: int = 0) -> dict:
    """注意力演示的一帧（不画图）：``tokens``（T 个，第 0 个是开头的换行）、``maps``
    （每层 [H, T, T]，见 :func:`gptcourse.evaluate.text_attention`）、选中的 ``layer``、``head``
    （从 0 起）与它的 ``weights`` [T, T]。层号、头号超出范围 → UserError。"""
    cfg = model.config
    layer = _index("layer", layer, cfg.n_layer, "层")
    head = _index("head", head, cfg.n_head, "头")
    tokens, maps = text_attention(model, tok, text)
    return {"text": text, "tokens": tokens, "maps": maps, "layer": layer, "head": head,
            "weights": maps[layer][head]}


def _index(name: str, i, n: int, unit: str) -> int:
    if not is_real(i) or int(i) != i or not 0 <= i < n:
        raise UserError(f"{name} 应是 0…{n - 1} 的整数（模型有 {n} 个{unit}，从 0 数起），"
                        f"收到 {i!r}")
    return int(i)


def draw_attention(frame: dict, ax) -> None:
    """选中的层与头画进 ax（行 = 查询，列 = 键，开头的换行画成 ↵），与静态图同一个函数。"""
    tokens = [_label(t) for t in frame["tokens"]]
    plot_attention_grid([m[None] for m in frame["maps"]], tokens, axes=[[ax]],
                        layers=[frame["layer"]], heads=[frame["head"]],
                        fontsize=min(11.0, max(6.0, 130.0 / len(tokens))))


def _attention_readout(frame: dict) -> str:
    row = frame["weights"][-1]                       # 最后一个字（它要预测下一个字）看谁
    j = int(row.argmax())
    last, seen = (html.escape(_label(frame["tokens"][i])) for i in (-1, j))
    return (f"第 {frame['layer'] + 1} 层 · 头 {frame['head'] + 1}：最后一个字「{last}」最看重"
            f"第 {j} 个位置的「{seen}」（权重 {float(row[j]):.2f}）；"
            f"{len(frame['tokens'])}×{len(frame['tokens'])} 的格子，右上方是看不到的未来")


def attention(model, tok, text: str = "白日依山尽，黄河入海流。", *, layer: int = 0, head: int = 0):
    """输入一句诗、选一层一个头 → 那个头的注意力（T×T，T = 1 + 字数；开头的换行记作 ↵）。

    ``layer``、``head`` 从 0 数起（下拉框里写成第 1 层、头 1）；超出范围 → UserError。
    返回 ipywidgets 容器（:class:`LiveDemo`），``demo.frame`` 见 :func:`attention_frame`。"""
    w = _ipywidgets()
    cfg = model.config
    layer, head = _index("layer", layer, cfg.n_layer, "层"), _index("head", head, cfg.n_head, "头")
    controls = {
        "text": w.Text(value=text, description="一句诗", continuous_update=False,
                       layout=w.Layout(width="32em")),
        "layer": w.Dropdown(options=[(f"第 {l + 1} 层", l) for l in range(cfg.n_layer)],
                            value=layer, description="层"),
        "head": w.Dropdown(options=[(f"头 {h + 1}", h) for h in range(cfg.n_head)], value=head,
                           description="头"),
    }

    def frame(v: dict):
        return attention_frame(model, tok, v["text"], v["layer"], v["head"])

    n = len(text) + 1
    side = min(7.0, max(3.8, 0.26 * n + 1.8))
    return _demo_class()(controls, frame, lambda f, fig: draw_attention(f, fig.subplots()),
                         _attention_readout, figsize=(side + 0.9, side),
                         what="注意力：一句诗、一层、一个头")


# ---------------------------------------------------------------- 容器
@functools.cache
def _demo_class():
    """LiveDemo 类（ipywidgets 的 VBox）：第一次用时才导入 ipywidgets，所以放在函数里定义。"""
    w = _ipywidgets()

    class LiveDemo(w.VBox):
        """控件 + 图 + 读数。任何一个控件的值变了就重算一帧、重画（``_update``）。

        - ``controls``：{名字: 控件}；``image``：PNG 图（``ipywidgets.Image``）；``readout``：读数；
        - ``frame``：最近一帧的数据；``timings``：每次更新（算 + 画 + 编码 PNG）的秒数；
        - 参数不对（开头里有词表外的字、太长……）：读数变成那句中文错误，图保持上一帧。
        """

        def __init__(self, controls: dict, compute: Callable[[dict], dict],
                     draw: Callable, readout: Callable[[dict], str], figsize, what: str):
            from matplotlib.figure import Figure  # 不经过 pyplot：不会被自动显示

            super().__init__(layout=w.Layout(align_items="flex-start"))   # 图按原尺寸，不拉伸
            self.controls, self.what = controls, what
            self._compute, self._draw, self._read = compute, draw, readout
            self._fig = Figure(figsize=figsize)
            self.image = w.Image(format="png", layout=w.Layout(max_width="100%"))
            self.readout = w.HTML()
            self.frame: dict = {}
            self.timings: list[float] = []
            self.children = [w.VBox(list(controls.values())), self.image, self.readout]
            self.add_class("gptcourse-live")
            for name, c in controls.items():
                c.add_class(f"live-{name}")                  # 页面上找得到它（浏览器测试用）
                c.observe(self._update, names="value")
            self._update()
            if not self.frame:                               # 初始设置就不对：立即说清楚
                raise UserError(self.error)

        error = ""

        def _update(self, change=None) -> None:
            t0 = time.perf_counter()
            try:
                with one_thread():
                    frame = self._compute({k: c.value for k, c in self.controls.items()})
            except UserError as e:
                self.error = str(e)
                self.readout.value = f"<span style='color:#a50f15'>{html.escape(str(e))}</span>"
                return
            self._fig.clear()
            self._draw(frame, self._fig)
            self.image.value = _png(self._fig)
            self.frame, self.error = frame, ""
            dt = time.perf_counter() - t0
            self.timings.append(dt)
            self.readout.value = (f"<div class='live-readout'>{self._read(frame)}"
                                  f"<br><small>这次更新用了 {dt * 1000:.0f} 毫秒</small></div>")

        def _repr_mimebundle_(self, **kwargs):
            data = super()._repr_mimebundle_(**kwargs) or {}
            data["text/plain"] = f"实时演示（{self.what}）：在 JupyterLab 里运行这一格就能拖动"
            data["image/png"] = base64.b64encode(self.image.value).decode("ascii")
            return data

    return LiveDemo
