"""命令行 ``python -m gptcourse export --hf 目录``：把检查点写成 Hugging Face 的文件夹。"""
from __future__ import annotations

from .. import checkpoint
from ..export import FILES, export_hf


def cli_arguments(p) -> None:
    p.add_argument("--hf", required=True, metavar="目录",
                   help="写出的文件夹（transformers 的 from_pretrained 直接读它）")
    p.add_argument("--checkpoint", default=None, help="检查点路径（默认：随课程发布的模型）")
    p.add_argument("--force", action="store_true", help="目录里已有文件时也覆盖")


def cli_main(args) -> int:
    model, tok, meta = checkpoint.load(args.checkpoint)
    out = export_hf(model, tok, meta, args.hf, force=args.force,
                    inputs=(args.checkpoint,))
    print(f"已写出 {out}：{'、'.join(FILES)}")
    print(f'试一试：python -c "from transformers import pipeline; '
          f"print(pipeline('text-generation', model='{out}')('春风', max_new_tokens=40))\"")
    return 0
