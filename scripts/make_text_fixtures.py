#!/usr/bin/env python3
"""Write the tiny zero-shot fixtures: a CLIPModel and a SiglipModel with both towers, each with
a tokenizer trained here, and float64 references of the text tower, the image tower and the
zero-shot scores, under tests/fixtures/models/ (beside make_family_fixtures.py's).

The tokenizers are made on the spot from the fixed corpus below, with the pipeline of each
family's released tokenizer (the `tokenizers` library's normalizers, pre-tokenizers and models;
the CLIP merges learnt here on the library's pre-tokenization, the SigLIP pieces by its
UnigramTrainer, both so that every run writes the same files):

  clip-zero-shot    byte-level BPE as transformers' CLIPTokenizer builds it (NFC, whitespace
                    runs to one space, lowercase; CLIP's Split pattern then ByteLevel; "</w>"
                    ends every word; <|startoftext|> text <|endoftext|>; pad <|endoftext|>),
                    the vocabulary laid out as CLIP's: the 256 byte symbols, the same with
                    "</w>", the merges in order, then the two special tokens.
  siglip-zero-shot  SentencePiece-style Unigram as SiglipTokenizer tokenizes (lowercase, ASCII
                    punctuation removed, whitespace runs to one space and stripped; Metaspace
                    "▁" prepended; text </s>; pad </s>; model_max_length 64), ids laid out as
                    the released spiece.model: <pad> 0, </s> 1, <unk> 2.

Each tokenizer is saved with transformers' `save_pretrained`, and every reference id comes from
`AutoTokenizer.from_pretrained` of the saved folder with `padding="max_length",
truncation=True, max_length=context`: the ids vitrt's tokenizer must give.

Each fixture folder holds the checkpoint (config.json, model.safetensors,
preprocessor_config.json, the tokenizer files), `text-reference.safetensors` (float64 PyTorch
with eager attention, stored as float32 like the other fixtures; ids as int64),
`torch-bf16-text.json` (PyTorch's own bf16 relative error per tensor) and `tokens.json` (the
ids of a set of awkward strings). siglip-zero-shot also holds `spiece.model`, its pieces as the
SentencePiece file released SigLIP checkpoints ship instead of tokenizer.json (with
SentencePiece's nmt_nfkc rules), and `spiece-tokens.json`, the ids transformers' slow
SiglipTokenizer gives from that file (written only when sentencepiece and protobuf are
installed). See ZERO-SHOT.md, which this script writes.

Usage: python scripts/make_text_fixtures.py [--out tests/fixtures/models] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import json
import shutil
import string
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_family_fixtures  # noqa: E402
from make_family_fixtures import randomize_parameters  # noqa: E402
from reference import disable_tf32, library_versions, save_reference  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent

# The training corpus of both tokenizers: varied English with punctuation, digits, contractions
# and a few accented words, so that merges and pieces form for common words and rarer text
# falls back to bytes (CLIP) or short pieces and <unk> (SigLIP).
CORPUS = """
A photo of a cat. A photo of a dog. A photo of a bird. A blurry photo of a small red car.
A close-up photo of the big brown dog sleeping on a sofa; the cat watches from the window.
There are 3 birds on the wire, 12 boats in the harbour and 1,024 stars in the picture.
It's a sunny day in the park: children play football, parents drink coffee and talk.
The café on the corner serves crêpes, croissants and a naïve but charming crème brûlée.
Don't forget the umbrella! Is it raining? Yes, it's raining cats and dogs, they'd say.
We'll meet at 7:30 pm near the old bridge over the river; bring the map and the camera.
An astronaut floats above the earth, and the planet glows blue and white below her.
A painting of a mountain lake at sunset, with pine trees, rocks and a wooden boat.
The quick brown fox jumps over the lazy dog while the farmer counts 42 sheep in the field.
Photos of food: pizza, pasta, salad, soup, bread, cheese, apples, oranges and bananas.
A diagram of a neural network with 2 layers, 16 hidden units and a softmax output.
The train leaves platform 9 at 10:45; tickets cost $25.50 or 23 euros for adults.
Señor García visited Zürich, Köln and São Paulo before he returned to Montréal.
Black and white photo of a street at night, wet with rain, lit by neon signs and cars.
A satellite image of a city: roads, rivers, parks, houses, towers and a stadium.
She's reading a book about whales, sharks, dolphins and other animals of the sea.
Two people ride bicycles along the beach; the sand is warm and the waves are calm.
A sketch of a horse, a cow, a sheep, a goat and a pig standing near a red barn.
This is not a drill -- repeat, this is NOT a drill. Stay calm & follow the signs.
""".strip()

# Strings whose ids tokens.json records: punctuation, accents, emoji, CJK, mixed case, runs of
# whitespace with tabs and newlines, digits, words never seen in training, the empty string
# and texts longer than the context.
LONG_TEXT = " ".join(
    ["a photo of a cat sitting next to a dog in the park on a sunny day."] * 12
)
TOKEN_STRINGS = [
    "a photo of a cat.",
    "A Photo Of A CAT!",
    "café naïve crème brûlée",
    "Señor García, Zürich & São Paulo",
    "it's, don't, we'll, they'd, I'm, you're, we've",
    "hello 🙂 world 🐈‍⬛ 👍🏽",
    "东京 的 猫 と 犬 이미지",
    "   leading and trailing spaces   ",
    "tabs\tand\nnewlines\r\n  and   runs   of    spaces",
    "3.14159 1,024 2026-11-25 7:30pm $25.50 #42",
    "zyxwvut qqqq xylophone",
    "(parentheses) [brackets] {braces} <angles> \"quotes\" 'single'",
    "<|endoftext|> </s> <pad> <unk> <|startoftext|>",
    "▁metaspace▁in▁text",
    "!!! leading punctuation, then text",
    "(!) spaced after punctuation",
    "?!",
    "a</s>b <unk>c",
    "",
    " ",
    LONG_TEXT,
    "word " * 200,
]

# The label prompts of the reference: three ordinary labels, the empty string and a text longer
# than either context (truncated).
PROMPTS = ["a photo of a cat.", "a photo of a dog.", "a photo of a bird.", "", LONG_TEXT]


@dataclass
class TextFixture:
    name: str
    summary: str
    model_class: str
    config_class: str
    text_config: dict
    vision_config: dict
    dual_config: dict
    # logit_scale (and SigLIP's logit_bias) after the redraw, so the scores are not degenerate.
    logit_scale: float
    logit_bias: float | None
    batch: int = 2


VISION_TINY = {
    "hidden_size": 32,
    "num_attention_heads": 2,
    "num_hidden_layers": 2,
    "intermediate_size": 64,
    "image_size": 32,
    "patch_size": 8,
}

TEXT_TINY = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
}

FIXTURES = [
    TextFixture(
        name="clip-zero-shot",
        summary="CLIPModel with a trained byte-level BPE tokenizer, context 77, pooled at the "
        "first end token (eos_token_id is its id, not the legacy 2)",
        model_class="CLIPModel",
        config_class="CLIPConfig",
        text_config={**TEXT_TINY, "max_position_embeddings": 77},
        vision_config=VISION_TINY,
        dual_config={"projection_dim": 24},
        logit_scale=2.3,
        logit_bias=None,
    ),
    TextFixture(
        name="siglip-zero-shot",
        summary="SiglipModel with a trained Unigram tokenizer, context 64, pooled at the last "
        "position then the text head",
        model_class="SiglipModel",
        config_class="SiglipConfig",
        text_config={**TEXT_TINY, "max_position_embeddings": 64},
        vision_config=VISION_TINY,
        dual_config={},
        logit_scale=2.3,
        logit_bias=-1.7,
    ),
]


def bytes_to_unicode() -> list[str]:
    """GPT-2's printable stand-ins for the 256 bytes, in CLIP's vocabulary order."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    codes = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            codes.append(256 + extra)
            extra += 1
    return [chr(code) for code in codes]


# The number of BPE merges of the CLIP tokenizer: with the 512 byte symbols and the 2 special
# tokens, a vocabulary of 664 at most (fewer when no pair occurs twice before).
CLIP_MERGES = 150


def learn_merges(tokenizer, lines: list[str], count: int) -> list[tuple[str, str]]:
    """BPE merges learnt on `lines` split into words by `tokenizer`'s normalizer and
    pre-tokenizer, each word's last symbol ending in "</w>": the most frequent adjacent pair
    first, equal counts in lexicographic order (the library's BpeTrainer breaks such ties
    differently from run to run), pairs seen once never merged."""
    from collections import Counter

    words = Counter()
    for line in lines:
        normalized = tokenizer.normalizer.normalize_str(line)
        for piece, _ in tokenizer.pre_tokenizer.pre_tokenize_str(normalized):
            words[tuple(piece[:-1]) + (piece[-1] + "</w>",)] += 1
    merges = []
    while len(merges) < count:
        pairs = Counter()
        for word, frequency in words.items():
            for pair in zip(word, word[1:]):
                pairs[pair] += frequency
        if not pairs:
            break
        best, frequency = min(pairs.items(), key=lambda item: (-item[1], item[0]))
        if frequency < 2:
            break
        merges.append(best)
        merged = Counter()
        for word, word_frequency in words.items():
            symbols, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    symbols.append(word[i] + word[i + 1])
                    i += 2
                else:
                    symbols.append(word[i])
                    i += 1
            merged[tuple(symbols)] += word_frequency
        words = merged
    return merges


def train_clip_tokenizer(model_dir: Path) -> None:
    from tokenizers import Regex, Tokenizer, normalizers, pre_tokenizers
    from tokenizers.models import BPE
    from transformers import CLIPTokenizer

    symbols = bytes_to_unicode()
    splitter = Tokenizer(BPE(continuing_subword_prefix="", end_of_word_suffix="</w>"))
    splitter.normalizer = normalizers.Sequence(
        [normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Lowercase()]
    )
    splitter.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(
                Regex(
                    r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+"""
                    r"""|[\p{N}]|[^\s\p{L}\p{N}]+"""
                ),
                behavior="removed",
                invert=True,
            ),
            pre_tokenizers.ByteLevel(add_prefix_space=False),
        ]
    )
    merges = learn_merges(splitter, CORPUS.splitlines(), CLIP_MERGES)

    # CLIP's layout: bytes, bytes ending a word, one token per merge, then the specials.
    tokens = symbols + [s + "</w>" for s in symbols]
    for left, right in merges:
        if left + right not in tokens:
            tokens.append(left + right)
    tokens += ["<|startoftext|>", "<|endoftext|>"]
    vocab = {token: index for index, token in enumerate(tokens)}
    tokenizer = CLIPTokenizer(vocab=vocab, merges=merges, model_max_length=77)
    tokenizer.save_pretrained(model_dir)


# SiglipTokenizer removes Python's string.punctuation (ASCII only) before SentencePiece.
PUNCTUATION = "[" + "".join("\\" + c for c in string.punctuation) + "]"
# Punctuation at the start of a text with something left after it once punctuation is removed.
LEADING_PUNCTUATION_BEFORE_TEXT = (
    r"\A" + PUNCTUATION + r"+(?=\s*[^\s" + PUNCTUATION[1:-1] + "])"
)


def siglip_normalizer():
    """SiglipTokenizer's text handling as a normalizer, with Metaspace prepending "▁" to the
    first segment only (the part before any special token in the text).

    SiglipTokenizer tokenizes "▁" + text, the text's own "▁" turned into spaces, lowercased,
    ASCII punctuation removed, whitespace runs collapsed to one space and stripped: a text
    that starts with whitespace (once its punctuation is gone) begins with a lone "▁" piece,
    which the Replace of leading whitespace by "▁ " reproduces. Metaspace's "first" scheme
    prepends only where the segment's first character is the text's first (original offset
    0), which a removed leading punctuation mark would move: leading punctuation is replaced
    by the "▁" itself (unless the text is punctuation alone, which SiglipTokenizer reduces to
    nothing)."""
    from tokenizers import Regex, normalizers

    return normalizers.Sequence(
        [
            normalizers.Replace("▁", " "),
            normalizers.Lowercase(),
            normalizers.Replace(Regex(LEADING_PUNCTUATION_BEFORE_TEXT), "▁"),
            normalizers.Replace(Regex(PUNCTUATION), ""),
            normalizers.Replace(Regex(r"\A\s+(?=\S)"), "▁ "),
            normalizers.Replace(Regex(r"\s+"), " "),
            normalizers.Strip(),
        ]
    )


def train_siglip_tokenizer(model_dir: Path) -> None:
    from tokenizers import AddedToken, Tokenizer, pre_tokenizers, processors
    from tokenizers.models import Unigram
    from tokenizers.trainers import UnigramTrainer
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(Unigram())
    tokenizer.normalizer = siglip_normalizer()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    trainer = UnigramTrainer(
        vocab_size=400,
        show_progress=False,
        special_tokens=["<pad>", "</s>", "<unk>"],
        unk_token="<unk>",
        max_piece_length=8,
    )
    tokenizer.train_from_iterator(CORPUS.splitlines(), trainer=trainer)
    # The trainer's scores vary from run to run (by up to 1e-3 for the rarest pieces, whose
    # order then changes too). Scores rounded to 1e-2 and pieces sorted by score then text give
    # the same file every run.
    trained = json.loads(tokenizer.to_str())["model"]["vocab"]
    specials, pieces = trained[:3], trained[3:]
    pieces = sorted(((piece, round(score, 2)) for piece, score in pieces),
                    key=lambda item: (-item[1], item[0]))
    normalizer, pre_tokenizer = tokenizer.normalizer, tokenizer.pre_tokenizer
    tokenizer = Tokenizer(Unigram([tuple(s) for s in specials] + pieces, unk_id=2))
    tokenizer.normalizer, tokenizer.pre_tokenizer = normalizer, pre_tokenizer
    # SiglipTokenizer's special tokens: </s> (end and pad) and <unk>, each eating the spaces
    # around it. <pad> is only a piece: in text it is plain characters.
    tokenizer.add_special_tokens(
        [AddedToken(t, lstrip=True, rstrip=True, normalized=False, special=True)
         for t in ("</s>", "<unk>")]
    )
    end_id = tokenizer.token_to_id("</s>")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", end_id)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="</s>",
        pad_token="</s>",
        unk_token="<unk>",
        model_max_length=64,
    )
    fast.save_pretrained(model_dir)


def siglip_spiece_proto(model_dir: Path, charsmap: bytes = b""):
    """A SentencePiece ModelProto with the pieces and scores of the saved tokenizer.json, laid
    out as a released SigLIP spiece.model: <pad> and </s> CONTROL, <unk> UNKNOWN, the rest
    NORMAL; Unigram; dummy prefix, extra whitespace removal and whitespace escaping on. With a
    `charsmap` the normalizer is "nmt_nfkc" with those precompiled rules (as released files
    carry), without one "identity"."""
    from sentencepiece import sentencepiece_model_pb2 as spm_proto

    piece_type = spm_proto.ModelProto.SentencePiece
    kinds = {"<pad>": piece_type.CONTROL, "</s>": piece_type.CONTROL, "<unk>": piece_type.UNKNOWN}
    proto = spm_proto.ModelProto()
    for piece, score in json.loads((model_dir / "tokenizer.json").read_text())["model"]["vocab"]:
        entry = proto.pieces.add()
        entry.piece, entry.score = piece, score
        entry.type = kinds.get(piece, piece_type.NORMAL)
    proto.trainer_spec.model_type = spm_proto.TrainerSpec.UNIGRAM
    proto.trainer_spec.pad_id, proto.trainer_spec.eos_id = 0, 1
    proto.trainer_spec.unk_id, proto.trainer_spec.bos_id = 2, -1
    proto.normalizer_spec.name = "nmt_nfkc" if charsmap else "identity"
    if charsmap:
        proto.normalizer_spec.precompiled_charsmap = charsmap
    proto.normalizer_spec.add_dummy_prefix = True
    proto.normalizer_spec.remove_extra_whitespaces = True
    proto.normalizer_spec.escape_whitespaces = True
    return proto


def nmt_nfkc_charsmap() -> bytes:
    """SentencePiece's built-in "nmt_nfkc" normalization rules (NFKC plus its whitespace and
    control-character mappings) in their precompiled form, taken from a throwaway model trained
    on the corpus: the bytes are the library's table, the same whatever the training text."""
    import io

    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as spm_proto

    written = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS.splitlines()),
        model_writer=written,
        vocab_size=100,
        normalization_rule_name="nmt_nfkc",
        minloglevel=2,
    )
    return spm_proto.ModelProto.FromString(written.getvalue()).normalizer_spec.precompiled_charsmap


# Strings that only SentencePiece's NFKC rules change: full-width letters, digits, punctuation
# and space, ligatures, circled and super/subscript digits, a decomposed accent, compatibility
# symbols, and full-width punctuation leading a text (NFKC makes it ASCII after SiglipTokenizer
# has removed ASCII punctuation, so it stays).
NFKC_STRINGS = [
    "ＡＢＣ　ｆｕｌｌｗｉｄｔｈ　ｃａｔ！",
    "！？ full-width punctuation first",
    "ﬁne ﬂowers ﬀ",
    "① ② ③ x² h₂o",
    "cafe\u0301 nai\u0308ve",
    "½ ™ ㎏ ℌ Ⅻ",
    "ｐｈｏｔｏ ｏｆ ａ ｄｏｇ",
    "ｈｅｌｌｏ\u3000\u3000world",
]

# Texts around special tokens written in the text and SiglipTokenizer's own "▁": a special
# token first, punctuation before and after one, one ending the text (SiglipTokenizer then adds
# no second </s>), a lone "▁", a character the NFKC rules delete before one, and NFKC adding a
# space.
SPECIAL_EDGE_STRINGS = [
    "</s> a photo",
    "!</s>!",
    "a </s>",
    "\u2581",
    "\u00ad</s>x",
    "\u00a8a \u00a8",
    # A </s> written where truncation ends the text (its 63rd token) and just after.
    "a " * 62 + "</s> and more text",
    "a " * 63 + "</s> and more text",
]


def write_siglip_spiece(model_dir: Path, context: int) -> bool:
    """Write `spiece.model` beside the saved tokenizer.json, the pieces and scores of the
    tokenizer.json with SentencePiece's nmt_nfkc rules (as released SigLIP files carry), and
    `spiece-tokens.json`: the ids transformers' slow SiglipTokenizer gives from that file alone
    for the strings of tokens.json, the prompts, NFKC_STRINGS and SPECIAL_EDGE_STRINGS, padded and truncated to
    `context` (the reference of vitrt's spiece.model reader). False, writing nothing, when the
    sentencepiece and protobuf packages are not installed."""
    try:
        import sentencepiece  # noqa: F401
        from sentencepiece import sentencepiece_model_pb2  # noqa: F401
    except ImportError:
        return False
    from transformers import SiglipTokenizer

    proto = siglip_spiece_proto(model_dir, nmt_nfkc_charsmap())
    path = model_dir / "spiece.model"
    path.write_bytes(proto.SerializeToString())
    slow = SiglipTokenizer(str(path), model_max_length=context)
    texts = TOKEN_STRINGS + PROMPTS + NFKC_STRINGS + SPECIAL_EDGE_STRINGS
    encoded = encode(slow, texts, context)
    cases = [
        {"text": text, "ids": ids.tolist(), "length": int(mask.sum())}
        for text, ids, mask in zip(texts, encoded["input_ids"], encoded["attention_mask"])
    ]
    document = {
        "context": context,
        "pad_id": slow.pad_token_id,
        "end_id": slow.eos_token_id,
        "how": f"SiglipTokenizer('spiece.model')(texts, padding='max_length', "
        f"truncation=True, max_length={context})",
        "cases": cases,
    }
    text = json.dumps(document, ensure_ascii=False, indent=None, separators=(", ", ": "))
    (model_dir / "spiece-tokens.json").write_text(text + "\n")
    return True


def slow_siglip_mismatches(model_dir: Path, texts: list[str], context: int) -> list[str] | None:
    """The texts on which transformers' SiglipTokenizer (SentencePiece), given a spiece.model
    with the same pieces and scores and no normalization rules, gives other ids than the saved
    tokenizer.json; None when the sentencepiece and protobuf packages are not installed."""
    try:
        from sentencepiece import sentencepiece_model_pb2  # noqa: F401
    except ImportError:
        return None
    import tempfile

    from transformers import AutoTokenizer, SiglipTokenizer

    proto = siglip_spiece_proto(model_dir)
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "spiece.model"
        path.write_bytes(proto.SerializeToString())
        slow = SiglipTokenizer(str(path), model_max_length=context)
        fast = AutoTokenizer.from_pretrained(model_dir)
        return [
            text for text in texts
            if encode(slow, [text], context)["input_ids"].tolist()
            != encode(fast, [text], context)["input_ids"].tolist()
        ]


def reference_tokenizer(model_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


def encode(tokenizer, texts: list[str], context: int) -> dict:
    return tokenizer(
        texts,
        padding="max_length",
        truncation=True,
        max_length=context,
        return_tensors="pt",
    )


def save_image_processor(fixture: TextFixture, model_dir: Path) -> None:
    size = fixture.vision_config["image_size"]
    if fixture.model_class == "CLIPModel":
        from transformers import CLIPImageProcessor

        processor = CLIPImageProcessor(
            size={"shortest_edge": size}, crop_size={"height": size, "width": size}
        )
    else:
        from transformers import SiglipImageProcessor

        processor = SiglipImageProcessor(size={"height": size, "width": size})
    processor.save_pretrained(model_dir)


def build_model(fixture: TextFixture, vocab_size: int, ids: dict, seed: int) -> nn.Module:
    import transformers

    config_class = getattr(transformers, fixture.config_class)
    text_config = {**fixture.text_config, "vocab_size": vocab_size, **ids}
    config = config_class(
        text_config=text_config,
        vision_config=fixture.vision_config,
        attn_implementation="eager",
        **fixture.dual_config,
    )
    torch.manual_seed(seed)
    model = getattr(transformers, fixture.model_class)(config)
    model.config.architectures = [fixture.model_class]
    randomize_parameters(model, torch.Generator().manual_seed(seed))
    with torch.no_grad():
        model.logit_scale.fill_(fixture.logit_scale)
        if fixture.logit_bias is not None:
            model.logit_bias.fill_(fixture.logit_bias)
    return model.eval()


@torch.no_grad()
def reference_outputs(model: nn.Module, text: dict, pixel_values: torch.Tensor) -> dict:
    """The text tower's states, both towers' embeddings and the scores, as float32.

    The model is called with the token ids alone, no padding mask, as vitrt runs the text
    towers: SigLIP was trained on sequences padded to 64 without a mask (and its tokenizer
    returns no mask), and CLIP's tower is causal and pools at the end token, so its pooled
    output and embeddings are the same with the tokenizer's mask (checked here); only CLIP's
    hidden states at padded positions would differ."""
    dtype = next(model.parameters()).dtype
    input_ids = text["input_ids"]
    text_out = model.text_model(input_ids=input_ids, output_hidden_states=True)
    layers = model.config.text_config.num_hidden_layers
    if len(text_out.hidden_states) != layers + 1:
        raise RuntimeError(f"expected {layers + 1} text hidden states")
    outputs = model(input_ids=input_ids, pixel_values=pixel_values.to(dtype))
    tensors = {}
    for index, state in enumerate(text_out.hidden_states):
        tensors[f"text_hidden_states.{index}"] = state
    tensors["text_last_hidden_state"] = text_out.last_hidden_state
    tensors["text_pooler_output"] = text_out.pooler_output
    image_pooled = model.vision_model(pixel_values.to(dtype)).pooler_output
    if type(model).__name__ == "CLIPModel":
        text_embeds = model.text_projection(text_out.pooler_output)
        image_embeds = model.visual_projection(image_pooled)
        probs = outputs.logits_per_image.softmax(dim=-1)
        masked = model.text_model(input_ids=input_ids, attention_mask=text["attention_mask"])
        if dtype == torch.float64 and not torch.allclose(
            masked.pooler_output, text_out.pooler_output, rtol=1e-12, atol=1e-12
        ):
            raise RuntimeError("CLIP's pooled output depends on the padding mask")
    else:
        text_embeds = text_out.pooler_output
        image_embeds = image_pooled
        probs = torch.sigmoid(outputs.logits_per_image)
    tensors["text_embeds"] = text_embeds
    tensors["image_embeds"] = image_embeds
    tensors["logits_per_image"] = outputs.logits_per_image
    tensors["probs"] = probs
    normalized = [("text_embeds", outputs.text_embeds), ("image_embeds", outputs.image_embeds)]
    for name, want in normalized:
        # The forward's own embeddings are normalized: ours must be them up to scale.
        ours = tensors[name] / tensors[name].norm(dim=-1, keepdim=True)
        if not torch.allclose(ours.to(want.dtype), want, atol=1e-2, rtol=1e-2):
            raise RuntimeError(f"{name} is not the forward's embedding before normalization")
    return {k: v.detach().to(torch.float32).contiguous() for k, v in tensors.items()}


def write_fixture(fixture: TextFixture, out_root: Path, seed: int) -> dict:
    import transformers

    model_dir = out_root / fixture.name
    if model_dir.exists():
        shutil.rmtree(model_dir)
    model_dir.mkdir(parents=True)
    if fixture.model_class == "CLIPModel":
        train_clip_tokenizer(model_dir)
    else:
        train_siglip_tokenizer(model_dir)
    tokenizer = reference_tokenizer(model_dir)
    context = fixture.text_config["max_position_embeddings"]
    end_id = tokenizer.eos_token_id
    pad_id = tokenizer.pad_token_id
    # The text config's special ids are the tokenizer's (SigLIP has no start token).
    ids = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": end_id, "pad_token_id": pad_id}

    model = build_model(fixture, len(tokenizer), ids, seed)
    model.save_pretrained(model_dir)
    save_image_processor(fixture, model_dir)

    # The reference comes from the files as written.
    model_class = getattr(transformers, fixture.model_class)
    reloaded = model_class.from_pretrained(model_dir, attn_implementation="eager")
    reloaded = reloaded.to(torch.float64).eval()
    text = encode(tokenizer, PROMPTS, context)
    generator = torch.Generator().manual_seed(seed)
    size = fixture.vision_config["image_size"]
    pixel_values = torch.randn(fixture.batch, 3, size, size, generator=generator)
    tensors = reference_outputs(reloaded, text, pixel_values)
    tensors = {
        "input_ids": text["input_ids"].to(torch.int64).contiguous(),
        "attention_mask": text["attention_mask"].to(torch.int64).contiguous(),
        "pixel_values": pixel_values,
        **tensors,
    }
    metadata = {
        "fixture": fixture.name,
        "class": fixture.model_class,
        "compute_dtype": "float64",
        "attention": "eager",
        "prompts": json.dumps(PROMPTS, ensure_ascii=False),
        "input": f"random normal pixels, batch {fixture.batch}, {size}x{size}, seed {seed}",
        **{f"version.{name}": version for name, version in versions().items()},
    }
    save_reference(model_dir / "text-reference.safetensors", tensors, metadata)
    write_torch_bf16_errors(model_class, model_dir, text, tensors)
    # The image tower's reference in make_family_fixtures.py's format, on the same pixels, so
    # the folder is also a vision parity fixture like every other folder here.
    vision = make_family_fixtures.reference_outputs(reloaded, pixel_values, False)
    vision_metadata = {k: v for k, v in metadata.items() if k != "prompts"}
    save_reference(model_dir / "reference.safetensors", vision, vision_metadata)
    make_family_fixtures.write_torch_bf16_errors(model_class, model_dir, vision, False)
    write_token_ids(tokenizer, model_dir, context)
    slow_check = None
    if fixture.model_class == "SiglipModel":
        slow_check = slow_siglip_mismatches(model_dir, TOKEN_STRINGS + PROMPTS, context)
        if slow_check:
            print(f"{fixture.name}: SiglipTokenizer differs on {slow_check!r}", file=sys.stderr)
        # The spiece.model a released SigLIP checkpoint ships instead of tokenizer.json.
        write_siglip_spiece(model_dir, context)
    return {
        "slow_check": slow_check,
        "fixture": fixture,
        "context": context,
        "vocab_size": len(tokenizer),
        "end_id": end_id,
        "pad_id": pad_id,
        "bos_id": ids["bos_token_id"],
        "shapes": {name: list(t.shape) for name, t in tensors.items()},
        "bytes": sum(p.stat().st_size for p in model_dir.iterdir()),
    }


def write_torch_bf16_errors(model_class, model_dir: Path, text: dict, reference: dict) -> None:
    """PyTorch's own bf16 relative error per tensor on the same inputs (max abs error / max abs
    reference), as torch-bf16-text.json: the figure a vitrt bf16 run must not exceed."""
    model = model_class.from_pretrained(model_dir).to(torch.bfloat16).eval()
    ours = reference_outputs(model, text, reference["pixel_values"])
    errors = {}
    for name, want in reference.items():
        if name in ("input_ids", "attention_mask", "pixel_values"):
            continue
        scale = want.abs().max().clamp_min(1e-30)
        errors[name] = float((ours[name] - want).abs().max() / scale)
    path = model_dir / "torch-bf16-text.json"
    path.write_text(json.dumps(errors, indent=1, sort_keys=True) + "\n")


def write_token_ids(tokenizer, model_dir: Path, context: int) -> None:
    encoded = encode(tokenizer, TOKEN_STRINGS, context)
    cases = [
        {"text": text, "ids": ids.tolist(), "length": int(mask.sum())}
        for text, ids, mask in zip(TOKEN_STRINGS, encoded["input_ids"], encoded["attention_mask"])
    ]
    document = {
        "context": context,
        "pad_id": tokenizer.pad_token_id,
        "end_id": tokenizer.eos_token_id,
        "how": f"AutoTokenizer.from_pretrained(folder)(texts, padding='max_length', "
        f"truncation=True, max_length={context})",
        "cases": cases,
    }
    text = json.dumps(document, ensure_ascii=False, indent=None, separators=(", ", ": "))
    (model_dir / "tokens.json").write_text(text + "\n")


def versions() -> dict[str, str]:
    import tokenizers

    return {**library_versions(), "tokenizers": tokenizers.__version__}


def slow_check_text(results: list[dict]) -> str:
    checks = [r["slow_check"] for r in results if r["fixture"].model_class == "SiglipModel"]
    count = len(TOKEN_STRINGS + PROMPTS)
    if not checks or checks[0] is None:
        return ("Not checked when this was written (sentencepiece and protobuf not installed):"
                " that SiglipTokenizer gives the same ids on an equivalent spiece.model.")
    if not checks[0]:
        return (f"Checked when this was written: transformers' SiglipTokenizer, given a"
                f" spiece.model with the same pieces and scores, gives the same ids as the saved"
                f" tokenizer.json on all {count} strings of tokens.json and the prompts.")
    return (f"SiglipTokenizer on an equivalent spiece.model differs on {len(checks[0])} of"
            f" {count} strings: " + ", ".join(f"`{t!r}`" for t in checks[0]) + ".")


def zero_shot_readme(results: list[dict]) -> str:
    versions_text = ", ".join(f"{k} {v}" for k, v in versions().items())
    lines = [
        "# Zero-shot fixtures: CLIP and SigLIP with both towers and their tokenizers",
        "",
        "Made by `scripts/make_text_fixtures.py`; do not edit by hand. To remake them:",
        "",
        "```",
        "python scripts/make_text_fixtures.py",
        "```",
        "",
        f"Versions: {versions_text}.",
        "",
        "Each folder is a complete checkpoint as `save_pretrained` writes it: `config.json`,",
        "`model.safetensors`, `preprocessor_config.json` and the tokenizer files",
        "(`tokenizer.json`, `tokenizer_config.json`; SigLIP's also `spiece.model`). The",
        "tokenizers are trained by the script on a fixed English corpus with the pipeline of the",
        "family's released tokenizer (see the script's docstring): CLIP's as transformers'",
        "`CLIPTokenizer(vocab, merges)` builds it,",
        "SigLIP's as described below. The weights are random, redrawn as in",
        "make_family_fixtures.py, with",
        "`logit_scale` set to 2.3 and SigLIP's `logit_bias` to -1.7.",
        "",
        "## Files",
        "",
        "- `tokens.json`: `{context, pad_id, end_id, how, cases: [{text, ids, length}]}`, the ids",
        "  `AutoTokenizer.from_pretrained(folder)` gives with `padding=\"max_length\",",
        "  truncation=True, max_length=context` for awkward strings (punctuation, accents, emoji,",
        "  CJK, mixed case, tabs and newlines, digits, special-token text, the empty string, texts",
        "  longer than the context). `length` is the number of real tokens (the attention mask).",
        "- `text-reference.safetensors`: float64 PyTorch with eager attention, stored as float32",
        "  (ids and mask as int64). The text inputs are the prompts",
        "  `a photo of a cat.`, `a photo of a dog.`, `a photo of a bird.`, the empty string and a",
        "  text longer than the context (the `prompts` metadata), tokenized as above; the model",
        "  is called with `input_ids` alone, no padding mask, as vitrt runs the text towers:",
        "  SigLIP was trained without one (its tokenizer returns none), and CLIP's causal tower",
        "  pooled at the end token gives the same pooled output and embeddings with the",
        "  tokenizer's mask (the script checks it); only its hidden states at padded positions",
        "  would differ:",
        "  - `input_ids`, `attention_mask` [N, context] (the mask: the tokenizer's, for the",
        "    lengths; not given to the model)",
        "  - `text_hidden_states.{i}` [N, context, 32], i = 0..=2: 0 is the embeddings output",
        "    (token + position), i the output of layer i, before the final layer norm",
        "    (`output_hidden_states=True`)",
        "  - `text_last_hidden_state` [N, context, 32]: after the final layer norm",
        "  - `text_pooler_output` [N, 32]: CLIP's state at the end token; SigLIP's last",
        "    position after its head",
        "  - `text_embeds`: CLIP [N, 24], the text projection of the pooled output; SigLIP",
        "    [N, 32], the pooled output. Not normalized.",
        "  - `pixel_values` [2, 3, 32, 32]: random normal",
        "  - `image_embeds`: CLIP [2, 24] (visual projection), SigLIP [2, 32] (the",
        "    attention-pooling head's output). Not normalized.",
        "  - `logits_per_image` [2, N]: `exp(logit_scale)` times the cosine similarities",
        "    (+ `logit_bias` for SigLIP), as the model's forward returns them",
        "  - `probs` [2, N]: CLIP the softmax over the labels, SigLIP the sigmoid of each logit",
        "    (transformers' zero-shot pipeline's scores)",
        "- `spiece.model` (siglip-zero-shot only): the tokenizer as released SigLIP checkpoints",
        "  ship it instead of `tokenizer.json`, a SentencePiece Unigram model with the pieces and",
        "  scores of the fixture's `tokenizer.json` and SentencePiece's `nmt_nfkc` normalization",
        "  rules (its precompiled charsmap, as released files carry; NFKC plus whitespace and",
        "  control-character mappings). vitrt reads it when a SigLIP checkpoint has no",
        "  `tokenizer.json`.",
        "- `spiece-tokens.json` (siglip-zero-shot only): as `tokens.json`, the ids transformers'",
        "  slow `SiglipTokenizer` gives from `spiece.model` alone, for the strings of",
        "  `tokens.json`, the prompts, and strings only the NFKC rules change (full-width text and",
        "  punctuation, ligatures, circled and super/subscript digits, a decomposed accent,",
        "  compatibility symbols), and strings around special tokens written in the text.",
        "- `torch-bf16-text.json`: PyTorch's own bf16 relative error per tensor (max abs error /",
        "  max abs reference) with the same inputs, transformers' default attention.",
        "- `reference.safetensors` and `torch-bf16.json`: the image tower's reference on the same",
        "  `pixel_values`, in make_family_fixtures.py's format (`last_hidden_state`,",
        "  `pooler_output`, `image_embeds`, `hidden_states.{i}`), so that these folders are also",
        "  vision parity fixtures like every other folder here (parity_cpu reads every one).",
        "",
        "## Pooling of the text towers",
        "",
        "CLIP (`CLIPTextTransformer`): when `text_config.eos_token_id == 2` (the legacy value of",
        "openai/clip-vit-* configs) the pooled state is at the argmax of the ids (the highest id,",
        "`<|endoftext|>` in CLIP's vocabulary); otherwise at the first position whose id equals",
        "`eos_token_id`. These fixtures set `eos_token_id` to the tokenizer's real",
        "`<|endoftext|>` id, so the second rule is exercised (the pad token is also",
        "`<|endoftext|>`: the first occurrence is the real end). SigLIP pools the last position",
        "(`last_hidden_state[:, -1]`, a pad position for all but full-length texts) and applies",
        "its linear head.",
        "",
        "## SigLIP's tokenizer in transformers 5.24",
        "",
        "Released SigLIP checkpoints (google/siglip-*) ship `spiece.model` and",
        "`tokenizer_class: SiglipTokenizer`, a SentencePiece (slow) tokenizer only: transformers",
        "has no fast SiglipTokenizer and no converter, and `AutoTokenizer` maps `siglip` to",
        "`SiglipTokenizer` alone (it needs the `sentencepiece` package). SiglipTokenizer",
        "lowercases, removes ASCII punctuation, collapses and strips whitespace in Python before",
        "SentencePiece, on \"▁\" + text, the dummy prefix only on the part before any special",
        "token written in the text. This fixture expresses that in a `tokenizer.json`: a",
        "normalizer (the text's \"▁\" to spaces, Lowercase, leading punctuation to \"▁\",",
        "punctuation removed, leading whitespace to \"▁ \", whitespace runs to one space, Strip;",
        "see `siglip_normalizer` in the script), Metaspace prepending to the first segment only,",
        "Unigram, `$A </s>`, `</s>` and `<unk>` special and stripping the spaces around them,",
        "saved through `PreTrainedTokenizerFast`, so `AutoTokenizer` loads it as a fast",
        "tokenizer and its ids are the reference. Released spiece.model files also carry a",
        "normalization rule (NFKC-based) that this identity-normalized tokenizer.json leaves",
        "out; the fixture's `spiece.model` carries it. A normalizer sees each segment between",
        "special tokens alone, so a segment after a special token written in the text that",
        "starts with punctuation gets a \"▁\" that SiglipTokenizer does not give it.",
        "",
        slow_check_text(results),
        "",
        "vitrt builds the same pipeline from a `spiece.model` (model/src/text/spiece.rs), with",
        "the file's precompiled charsmap applied after SiglipTokenizer's own text handling, as",
        "SentencePiece applies it. It puts SiglipTokenizer's \"▁\" before the text itself",
        "rather than by a normalizer rule, so it agrees on the special-token string as well:",
        "model/tests/tokenizer.rs holds it to every string of `spiece-tokens.json`.",
        "",
        "| fixture | what it covers | context | vocab | end id | pad id | bos id | size |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        f = r["fixture"]
        bos = "none" if r["bos_id"] is None else r["bos_id"]
        lines.append(
            f"| `{f.name}` | {f.summary} | {r['context']} | {r['vocab_size']} | {r['end_id']} | "
            f"{r['pad_id']} | {bos} | {r['bytes'] / 1024:.0f} KiB |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "tests/fixtures/models")
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--seed", type=int, default=20261125)
    args = parser.parse_args(argv)
    disable_tf32()
    known = {f.name for f in FIXTURES}
    for name in args.only or []:
        if name not in known:
            parser.error(f"unknown fixture {name!r} (known: {', '.join(sorted(known))})")
    results = []
    for index, fixture in enumerate(FIXTURES):
        if args.only and fixture.name not in args.only:
            continue
        result = write_fixture(fixture, args.out, args.seed + index)
        results.append(result)
        print(
            f"{fixture.name:18} {result['bytes'] / 1024:6.0f} KiB  context {result['context']}, "
            f"vocab {result['vocab_size']}, end {result['end_id']}, pad {result['pad_id']}"
        )
    if not args.only:
        (args.out / "ZERO-SHOT.md").write_text(zero_shot_readme(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
