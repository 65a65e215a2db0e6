"""旧名字：``gptcourse.bench`` 已移到教师与维护者的包（见 ``gptcourse/cli/forward.py``）；
这里只留下 ``python -m gptcourse.bench`` 的转发，保留一个版本。"""
