"""练习检查器：``gptcourse.check.nbXX.<练习名>(你的函数)`` 打印“正确 ✓”或哪里不对，返回 True/False。

练习按章节登记（``"nb05.guess_offset"``，见 ``_common``）。学生版用的 ``mine`` / ``ready``：
学员的函数还是存根时先用包里的版本、证明单元格打印“还没完成”。教师版可以用
``enable_solutions()`` 之后用 ``show_solution("nb05.guess_offset")`` 打印参考答案（学生版里
默认不显示）。
"""
from ._common import (  # noqa: F401  (最后导入：
                      SOLUTIONS,
                      choice,
                      enable_solutions,
                      fallback,
                      is_stub,
                      mine,
                      ready,
                      results,
                      show_solution,  # 不被各章的同名覆盖)
)
from .nb01 import *  # noqa: F401,F403
from .nb02 import *  # noqa: F401,F403
from .nb03 import *  # noqa: F401,F403
from .nb04 import *  # noqa: F401,F403
from .nb05 import *  # noqa: F401,F403
