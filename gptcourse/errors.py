"""错误的分类：用户输入有误（参数、文件、提示、检查点）与程序本身的问题分开。

- :class:`UserError` 是一切“用户给的东西不对”的基类（它也是 ``ValueError``，所以
  ``except ValueError`` / ``pytest.raises(ValueError)`` 照常有效）。命令行只把它变成一行中文
  + 退出码 2，网页服务只把它变成 400；**其余任何异常都是程序的问题**，照常显示堆栈。
- 按类型分类，而不是按“异常从哪个文件抛出”：包里的一个真 bug（比如解包失败的 ValueError）
  不会被当成用户错误而丢掉堆栈。
"""
from __future__ import annotations

import numbers


def is_real(v) -> bool:
    """参数检查用：实数（int、float、NumPy 的数；不含 bool），且不是 NaN。"""
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and v == v


class UserError(ValueError):
    """用户输入有误：信息是一句中文，说清是哪个参数、收到了什么、应该是什么。"""


class MissingFileError(UserError, FileNotFoundError):
    """用户指定的文件不存在（既是 UserError，也是 FileNotFoundError）。"""


class MachineError(Exception):
    """机器的问题（磁盘满、只读、没有权限）：不是用户输错了，也不是程序的 bug。命令行只把它变成
    stderr 上一行中文 + 退出码 1，没有堆栈。"""
