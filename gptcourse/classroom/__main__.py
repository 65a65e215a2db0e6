from gptcourse.cli.forward import forward

forward("gptcourse.classroom")
