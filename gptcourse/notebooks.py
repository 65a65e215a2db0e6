"""旧名字：笔记本运行器已移到教师与维护者的包（见 ``gptcourse/cli/forward.py``）；
这里只留下 ``python -m gptcourse.notebooks`` 的转发，保留一个版本。"""
if __name__ == "__main__":
    from gptcourse.cli.forward import forward

    forward("gptcourse.notebooks")
