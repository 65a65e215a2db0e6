"""练习检查器：``gptcourse.check.nbXX.<练习名>(你的函数)`` 打印“正确 ✓”或哪里不对，返回 True/False。

练习按章节登记（``"nb05.guess_offset"``，见 ``_common``），只从各章的模块取：
``gc.check.nb05.guess_offset``。学生版用的 ``mine`` / ``ready`` / ``fallback``：学员的函数还是
存根时先用包里的版本、证明单元格打印“还没完成”。教师版可以用 ``enable_solutions()`` 之后用
``show_solution("nb05.guess_offset")`` 打印教师版笔记本里这道题的答案单元格（学生版里默认不显示）。
"""
from . import nb01, nb02, nb03, nb04, nb05  # noqa: F401
from ._common import (  # noqa: F401
    FALLBACKS,
    choice,
    enable_solutions,
    fallback,
    is_stub,
    mine,
    ready,
    results,
    show_solution,
)
