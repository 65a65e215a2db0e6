"""命令行 ``python -m gptcourse serve``：本地网页演示（默认解码参数 = 检查点的发布设置）。"""
from __future__ import annotations

import argparse

from .. import checkpoint, release
from ..errors import UserError
from ..fastdecode import compiler_available
from ..serve import make_server


def cli_arguments(p) -> None:
    p.add_argument("--checkpoint", default=None, help="检查点路径（默认：随课程发布的模型）")
    p.add_argument("--host", default="127.0.0.1",
                   help="监听地址（默认只允许本机访问；课堂上给全班用：0.0.0.0）")
    p.add_argument("--port", type=int, default=8000, help="端口（默认 8000；0 = 随机空闲端口）")
    p.add_argument("--allow-host", action="append", default=[], metavar="名字",
                   help="额外允许的 Host 名（例如 teacher-pc.local；可重复）")
    p.add_argument("--allow-origin", action="append", default=[], metavar="来源",
                   help="额外允许的跨站来源（例如 http://course.example；可重复）")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="在后台编译快速解码（默认：有 C++ 编译器时编译；编译结果缓存在 "
                        "$GPTCOURSE_INDUCTOR_CACHE 或用户缓存目录，第二次启动只要几秒）")


def cli_main(args) -> int:
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port 必须在 0–65535 之内，收到 {args.port}")
    model, tok, meta = checkpoint.load(args.checkpoint)
    try:
        server = make_server(model, tok, args.host, args.port, verbose=True,
                             allow_hosts=args.allow_host, allow_origins=args.allow_origin,
                             defaults=release.settings(meta),
                             compile=compiler_available()[0] if args.compile is None
                             else args.compile)
    except OSError as e:
        raise UserError(f"无法在 {args.host}:{args.port} 上启动服务器（{e.strerror or e}）") \
            from None
    host, port = server.server_address[:2]
    print(f"网页演示已启动：http://{host}:{port}/  （按 Ctrl+C 停止）", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("\n已停止。")
    finally:
        server.server_close()
    return 0
