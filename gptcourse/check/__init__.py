"""练习检查器：``gptcourse.check.<练习名>(你的函数)`` 打印“正确 ✓”或哪里不对，并返回 True/False。

参考答案：``gptcourse.check.show_solution("练习名")``。
"""
from .nb01 import *  # noqa: F401,F403
from .nb02 import *  # noqa: F401,F403,E402
from .nb03 import *  # noqa
from .nb04 import *  # noqa: F401,F403,E402
from .nb05 import *  # noqa: F401,F403,E402
