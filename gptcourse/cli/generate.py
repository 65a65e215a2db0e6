"""命令行 ``python -m gptcourse generate``：用检查点写诗（默认随课程发布的模型与它的发布设置）。"""
from __future__ import annotations

import argparse
import sys

from .. import checkpoint, release
from ..errors import UserError
from ..generate import DEFAULT_MAX_NEW_TOKENS, VerseSpec, generate_batch, stream_tokens
from ..runtime import get_device
from ..verse import FORMS


def cli_arguments(p) -> None:
    p.add_argument("--checkpoint", default=None, help="检查点路径（默认：随课程发布的模型）")
    p.add_argument("--prompt", default="", help="开头（例如“春”或完整的第一句“白日依山尽，”）")
    p.add_argument("-n", "--num-samples", type=int, default=1, help="写几首（默认 1）")
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help=f"最多生成多少个词元（默认 {DEFAULT_MAX_NEW_TOKENS}；"
                        "有诗体约束时正好一首）")
    p.add_argument("--temperature", type=float, default=None,
                   help="温度，0 = 贪心（默认：检查点的发布设置）")
    p.add_argument("--top-k", type=int, default=None, help="只在最可能的 k 个字里抽样")
    p.add_argument("--top-p", type=float, default=None,
                   help="核采样阈值，(0, 1]（默认：检查点的发布设置）")
    p.add_argument("--repetition-penalty", type=float, default=None,
                   help="重复惩罚，1 = 不惩罚（默认：检查点的发布设置）")
    p.add_argument("--seed", type=int, default=None, help="随机种子（第 i 首用 seed + i）")
    p.add_argument("--form", choices=list(FORMS), default=None, help="诗体：五绝/五律/七绝/七律")
    p.add_argument("--acrostic", default=None, help="藏头字，例如 春夏秋冬")
    p.add_argument("--title", default=None,
                   help="以题作诗：题目（例如 送友人；用以题作诗微调过的检查点效果才好）")
    p.add_argument("--rhyme", action=argparse.BooleanOptionalAction, default=None,
                   help="押韵：双数句末字同一平声韵部（默认：检查点的发布设置）")
    p.add_argument("--rhyme-group", default=None,
                   help="指定平声韵部（全名或韵目字，例如 下平七阳 或 阳；隐含 --rhyme）")
    p.add_argument("--tones", action=argparse.BooleanOptionalAction, default=None,
                   help="平仄：第 2、4、6 字分明、相对、相粘（默认：检查点的发布设置）")
    p.add_argument("--stream", action="store_true", help="边生成边输出")
    p.add_argument("--no-cache", action="store_true", help="不用 KV 缓存（每步整段重算，较慢）")
    p.add_argument("--device", default=None, help="cpu / cuda / mps（默认自动选择）")


MAX_SAMPLES = 10_000          # -n 的上限（成批生成时 KV 缓存按批分配，内存不随 -n 增长）


def cli_main(args) -> int:
    if not 1 <= args.num_samples <= MAX_SAMPLES:
        raise UserError(f"-n 必须在 [1, {MAX_SAMPLES}] 之内，收到 {args.num_samples}")
    model, tok, meta = checkpoint.load(args.checkpoint,
                                       map_location=str(get_device(args.device)))
    given = {name: getattr(args, name) for name in (*release.SETTING_KEYS, *VerseSpec.names())}
    d = release.decoding(meta, given, args.max_new_tokens, tok, args.prompt)   # 检查过的设置
    relaxed = list(d.relaxed)                      # 发布设置没用上、约束放宽过：写在 stderr
    kw = dict(max_new_tokens=args.max_new_tokens, use_cache=not args.no_cache,
              params=d.params, spec=d.spec, relaxed=relaxed)
    if args.stream:
        for i in range(args.num_samples):
            seed = None if args.seed is None else args.seed + i
            print(args.prompt, end="", flush=True)
            for piece in stream_tokens(model, tok, args.prompt, seed=seed, **kw):
                print(piece, end="", flush=True)
            print(flush=True)
    else:
        poems = generate_batch(model, tok, [args.prompt] * args.num_samples, seed=args.seed,
                               **kw)
        sys.stdout.write("".join(poem + "\n" for poem in poems))
    for note in dict.fromkeys(relaxed):
        print(f"注：{note}", file=sys.stderr)
    return 0
