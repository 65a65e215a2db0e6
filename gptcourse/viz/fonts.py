"""中文字体：把随包附带的 GPTCourse CJK Sans 注册给 matplotlib。

为什么需要它？matplotlib 默认的 DejaVu Sans 没有汉字字形，中文标签会变成方框，并打印
``Glyph ... missing from font(s) DejaVu Sans`` 警告。课程不依赖系统字体：我们随包附带一个
Noto Sans CJK 的子集（SIL OFL 1.1），并把它放在 DejaVu Sans **之后**作为回退字体——
拉丁字母、数字与负号（U+2212）仍由 DejaVu Sans 绘制，汉字由 GPTCourse CJK Sans 绘制。
"""
from __future__ import annotations

import sys
from pathlib import Path

from ..errors import MissingFileError

FONT_DIR = Path(__file__).resolve().parent.parent / "fonts"
FONT_FILE = FONT_DIR / "GPTCourseCJKSans-Regular.otf"
FONT_FAMILY = "GPTCourse CJK Sans"
LATIN_FAMILY = "DejaVu Sans"

_registered = False


def register_font() -> str:
    """把字体文件加入 matplotlib 的字体管理器（只做一次），返回字体族名。"""
    global _registered
    from matplotlib import font_manager

    if not FONT_FILE.is_file():
        raise MissingFileError(
            f"找不到课程字体文件 {FONT_FILE.name}（应位于 gptcourse/fonts/）；"
            "请重新安装 gptcourse。"
        )
    if not _registered:
        font_manager.fontManager.addfont(str(FONT_FILE))
        _registered = True
    return font_manager.FontProperties(fname=str(FONT_FILE)).get_name()


def configure_matplotlib(dpi: int = 100, figsize: tuple[float, float] = (6.4, 4.0)) -> str:
    """注册中文字体、设置绘图默认值；在 IPython/Jupyter 中让内嵌图片使用 PNG。返回中文字体族名。"""
    import matplotlib as mpl

    family = register_font()
    # 回退链必须直接写在 font.family 里：matplotlib 只会在 font.family 列出的字体之间逐字回退，
    # 通用族 "sans-serif" 只会解析成列表中第一个可用字体。sans-serif 列表也放上同样两项，
    # 这样显式写 family="sans-serif" 的代码同样能用 DejaVu Sans 画拉丁字母。
    mpl.rcParams["font.family"] = [LATIN_FAMILY, family]
    others = [f for f in mpl.rcParams["font.sans-serif"] if f not in (LATIN_FAMILY, family)]
    mpl.rcParams["font.sans-serif"] = [LATIN_FAMILY, family, *others]
    # DejaVu Sans 有真正的负号 U+2212，所以保留 unicode_minus=True（比连字符 "-" 更规范）。
    mpl.rcParams["axes.unicode_minus"] = True
    mpl.rcParams["figure.dpi"] = dpi
    mpl.rcParams["savefig.dpi"] = dpi
    mpl.rcParams["figure.figsize"] = list(figsize)
    mpl.rcParams["axes.grid"] = False
    mpl.rcParams["axes.spines.top"] = False
    mpl.rcParams["axes.spines.right"] = False
    mpl.rcParams["svg.fonttype"] = "none"
    _use_png_inline()
    return family


def _use_png_inline() -> None:
    """只在 IPython 内核里生效：笔记本中的图片统一为 PNG（不是 SVG）。"""
    if "IPython" not in sys.modules:
        return
    try:
        from IPython import get_ipython

        if get_ipython() is None:
            return
        from matplotlib_inline.backend_inline import set_matplotlib_formats

        set_matplotlib_formats("png")
    except ImportError:  # pragma: no cover - 没装 matplotlib-inline 时保持默认
        pass
