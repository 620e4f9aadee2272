#!/usr/bin/env python3
"""Make the image fixtures of model/tests/preprocess.rs.

Writes small test images, made from photos that ship inside scikit-image (`skimage.data`),
to tests/fixtures/images/, one preprocessor_config.json per processor configuration to
tests/fixtures/images/configs/, and Hugging Face's `pixel_values` for each (image, config)
pair to tests/fixtures/images/reference_pixel_values.safetensors, under the key
"<config>/<image file>", each a [C, H, W] float32 tensor.

The references follow the path a file takes through `pipeline("image-classification")`:
`transformers.image_utils.load_image` (EXIF orientation applied, then PIL's convert("RGB"),
which drops any alpha channel) followed by the slow, PIL-based ViTImageProcessor
(`ViTImageProcessorPil` in transformers 5). The one-channel references (for models whose
config.json says num_channels = 1, which HF's pipeline does not serve) take the same path but
convert to PIL's "L" instead of "RGB", and are named "<config>@1ch/<image file>".

The configurations whose names start with "timm_" are timm checkpoints' config.json, whose
`pretrained_cfg` goes through timm's eval transform (`timm.data.create_transform(
**timm.data.resolve_data_config(pretrained_cfg), is_training=False)`, as transformers'
TimmWrapperImageProcessor runs it) after the same `load_image`.

Usage: python3 scripts/make_image_fixtures.py [--out tests/fixtures/images]
Needs: pip install transformers pillow numpy scikit-image safetensors timm torchvision torch
(versions in scripts/requirements.txt; torch and torchvision's CPU builds are enough).
"""

import argparse
import io
import json
import pathlib
import struct
import warnings
import zlib

import numpy as np
import PIL
import skimage
import skimage.data
import timm
import timm.data
import torch
import torchvision
import transformers
from PIL import Image, ImageOps
from safetensors.numpy import save_file
from transformers.image_utils import load_image

try:  # transformers 5 names the PIL backend explicitly; 4.x has only the slow classes.
    from transformers import BitImageProcessorPil as SlowBitImageProcessor
    from transformers import CLIPImageProcessorPil as SlowCLIPImageProcessor
    from transformers import DeiTImageProcessorPil as SlowDeiTImageProcessor
    from transformers import ViTImageProcessorPil as SlowViTImageProcessor
except ImportError:
    from transformers import BitImageProcessor as SlowBitImageProcessor
    from transformers import CLIPImageProcessor as SlowCLIPImageProcessor
    from transformers import DeiTImageProcessor as SlowDeiTImageProcessor
    from transformers import ViTImageProcessor as SlowViTImageProcessor


IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]

# name -> (preprocessor_config.json contents, image files it is applied to). The default
# 224 configuration gives the largest references, so it covers only two images.
CONFIGS = {
    "vit_default": ({}, ["cat.jpg", "coffee.png"]),
    "bicubic_64_imagenet": (
        {
            "size": {"height": 64, "width": 64},
            "resample": 3,
            "image_mean": IMAGENET_MEAN,
            "image_std": IMAGENET_STD,
        },
        "all",
    ),
    "lanczos_40x56": (
        {
            "size": {"height": 40, "width": 56},
            "resample": 1,
            "image_mean": [0.4, 0.5, 0.6],
            "image_std": [0.2, 0.25, 0.3],
        },
        ["cat.jpg", "astronaut_rgba.png", "cat_palette.png", "coffee_exif6.jpg"],
    ),
    "box_int_size_32": ({"size": 32, "resample": 4}, ["cat.jpg", "astronaut_rgba.png"]),
    "hamming_24x40": (
        {"size": {"height": 24, "width": 40}, "resample": 5},
        ["coffee.png", "camera_gray.png"],
    ),
    "nearest_list_size_30x45": (
        {"size": [30, 45], "resample": 0},
        ["cat.jpg", "coffee_exif6.jpg"],
    ),
    # The height shrinks by more than twice as many pixels as the width: Pillow 13 runs the
    # vertical pass first here.
    "bicubic_16x120": (
        {"size": {"height": 16, "width": 120}, "resample": 3},
        ["coffee.png", "astronaut.webp"],
    ),
    "bilinear_no_rescale_48": (
        {
            "size": {"height": 48, "width": 48},
            "do_rescale": False,
            "image_mean": [127.5, 127.5, 127.5],
            "image_std": [64.0, 64.0, 64.0],
        },
        ["cat_palette.png", "astronaut.webp"],
    ),
    "no_resize_no_normalize": (
        {"do_resize": False, "size": {"height": 72, "width": 96}, "do_normalize": False},
        ["camera_gray.png"],
    ),
    # Center crop (resize, then crop, then rescale and normalise), as DeiT's, CLIP's and BiT's
    # processors do; each runs through its own processor class (PROCESSOR_CLASSES), and
    # "astronaut_portrait.png" (taller than wide) covers the other branch of the shortest edge.
    # DeiT-like: a fixed size, then a smaller crop.
    "deit_fixed_72_crop_64": (
        {
            "size": {"height": 72, "width": 72},
            "do_center_crop": True,
            "crop_size": {"height": 64, "width": 64},
            "resample": 3,
            "image_mean": IMAGENET_MEAN,
            "image_std": IMAGENET_STD,
        },
        ["cat.jpg", "coffee_exif6.jpg"],
    ),
    # CLIP-like: the shortest edge, then a square crop of the middle.
    "clip_shortest_edge_56_crop_48": (
        {
            "image_processor_type": "CLIPImageProcessor",
            "size": {"shortest_edge": 56},
            "do_center_crop": True,
            "crop_size": {"height": 48, "width": 48},
            "resample": 3,
            "image_mean": CLIP_MEAN,
            "image_std": CLIP_STD,
            "do_convert_rgb": True,
        },
        ["cat.jpg", "coffee_exif6.jpg", "astronaut_rgba.png", "astronaut_portrait.png"],
    ),
    # An integer size is the shortest edge for CLIP's processor (its default_to_square is
    # false); the 43 x 36 crop is taller than the 40-pixel short side, which HF pads with
    # zeros (two rows above, one below), and narrower than the long one.
    "clip_int_size_40_crop_43x36_padded": (
        {
            "image_processor_type": "CLIPImageProcessor",
            "size": 40,
            "do_center_crop": True,
            "crop_size": {"height": 43, "width": 36},
            "resample": 2,
            "image_mean": CLIP_MEAN,
            "image_std": CLIP_STD,
        },
        ["cat.jpg", "astronaut_portrait.png"],
    ),
    # BiT (DINOv2's processor): shortest edge with an odd crop, integer crop_size.
    "bit_shortest_edge_33_crop_31": (
        {
            "image_processor_type": "BitImageProcessor",
            "size": {"shortest_edge": 33},
            "do_center_crop": True,
            "crop_size": 31,
            "resample": 3,
            "image_mean": IMAGENET_MEAN,
            "image_std": IMAGENET_STD,
        },
        ["coffee.png", "astronaut_portrait.png"],
    ),
    # No resize: the crop alone, wider than the 96-pixel image (8 columns of zeros on the left,
    # 7 on the right) and shorter than it.
    "no_resize_crop_64x111": (
        {
            "do_resize": False,
            "do_center_crop": True,
            "crop_size": [64, 111],
            "do_normalize": False,
        },
        ["camera_gray.png"],
    ),
    # Every EXIF orientation: the upright image is 24 wide and 16 high in each file.
    "orientation_no_resize": (
        {"do_resize": False, "size": {"height": 16, "width": 24}, "do_normalize": False},
        "orientation",
    ),
}

# Configurations that give little more than `image_processor_type`: every field they leave out
# takes that class's default, which the reference takes from transformers' class of that name
# (its PIL variant). The sizes are small so that the references stay small; the classes' default
# sizes are checked by the Rust unit tests. Each runs through the class its image_processor_type
# names (see processor_class).
CLASS_DEFAULT_CONFIGS = {
    # CLIP: bicubic, shortest edge then a center crop, CLIP's mean and std, do_convert_rgb.
    "clip_defaults_shortest_edge_40_crop_32": (
        {"image_processor_type": "CLIPImageProcessor", "size": {"shortest_edge": 40}, "crop_size": 32},
        [
            "cat.jpg",
            "astronaut_rgba.png",
            "cat_palette.png",
            "cat_palette_transparent_index.png",
            "astronaut_portrait.png",
        ],
    ),
    # BiT (DINOv2 names it): CLIP's defaults; an integer size is the shortest edge.
    "bit_defaults_int_size_36_crop_30": (
        {"image_processor_type": "BitImageProcessor", "size": 36, "crop_size": {"height": 30, "width": 30}},
        ["coffee.png", "camera_gray.png", "coffee_exif6.jpg"],
    ),
    # DeiT: bicubic, a square resize then a crop, mean and std 0.5; an integer size is a square.
    "deit_defaults_int_size_48_crop_40": (
        {"image_processor_type": "DeiTImageProcessor", "size": 48, "crop_size": 40},
        ["cat.jpg", "astronaut.webp"],
    ),
    # SigLIP: bicubic, no crop, mean and std 0.5.
    "siglip_defaults_40x40": (
        {"image_processor_type": "SiglipImageProcessor", "size": {"height": 40, "width": 40}},
        ["cat.jpg", "cat_palette.png", "cat_palette_transparent_index.png"],
    ),
    # BEiT: bicubic, no crop by default, mean and std 0.5.
    "beit_defaults_int_size_40": (
        {"image_processor_type": "BeitImageProcessor", "size": 40},
        ["coffee.png", "astronaut_rgba.png", "cat_palette_transparent_index.png"],
    ),
    # ConvNeXT reads crop_pct: the shortest edge becomes int(48 / 0.9) = 53, then a 48 x 48 crop.
    "convnext_crop_pct_0.9_size_48": (
        {"image_processor_type": "ConvNextImageProcessor", "size": 48, "crop_pct": 0.9},
        ["cat.jpg", "astronaut_portrait.png"],
    ),
    # The 4.x spelling, feature_extractor_type, names the class too.
    "deit_feature_extractor_type_size_40_crop_33": (
        {"feature_extractor_type": "DeiTFeatureExtractor", "size": 40, "crop_size": 33},
        ["coffee.png"],
    ),
}

# A configuration with only ViT's image_processor_type: every field is ViT's default, which is
# what vit_default (an empty config) covers; main() checks that the two give the same values
# and stores no reference of its own.
VIT_TYPE_ONLY = ("vit_type_only", {"image_processor_type": "ViTImageProcessor"}, "vit_default")

# timm checkpoints' pretrained_cfg (what their config.json holds under that key), run through
# timm's eval transform: `create_transform(**resolve_data_config(cfg), is_training=False)`, which
# transformers' TimmWrapperImageProcessor runs too. The keys other than the transform's are
# copied from real configs so that the reader is shown to ignore them.
TIMM_CONFIGS = {
    # vit_base_patch16_224.augreg2_in21k_ft_in1k's, at 64 instead of 224 to keep the
    # references small: Resize(floor(64 / 0.9) = 71) of the shortest edge, CenterCrop(64),
    # whose odd margin of 7 starts the crop at round(3.5) = 4 where HF's would start at 3.
    "timm_vit_augreg2_like_64": (
        {
            "tag": "augreg2_in21k_ft_in1k",
            "custom_load": False,
            "input_size": [3, 64, 64],
            "fixed_input_size": True,
            "interpolation": "bicubic",
            "crop_pct": 0.9,
            "crop_mode": "center",
            "mean": [0.5, 0.5, 0.5],
            "std": [0.5, 0.5, 0.5],
            "num_classes": 1000,
            "pool_size": None,
            "first_conv": "patch_embed.proj",
            "classifier": "head",
        },
        "all+portrait",
    ),
    # crop_pct 1.0 with ImageNet's mean and std and bilinear: the crop is the middle of the
    # shortest-edge resize. levels_16.png is already 16 x 16, so it reaches ToTensor and
    # Normalize untouched, with every byte value in every channel.
    "timm_imagenet_crop_pct_1.0_16": (
        {
            "input_size": [3, 16, 16],
            "interpolation": "bilinear",
            "crop_pct": 1.0,
            "mean": [0.485, 0.456, 0.406],
            "std": [0.229, 0.224, 0.225],
            "num_classes": 1000,
        },
        ["levels_16.png", "cat.jpg", "coffee_exif6.jpg", "camera_gray.png", "astronaut_portrait.png"],
    ),
    # "squash": both sides to floor(side / 0.85), (47, 56) here, then CenterCrop(40 x 48), whose
    # vertical margin of 7 rounds as above.
    "timm_squash_40x48": (
        {
            "input_size": [3, 40, 48],
            "interpolation": "bicubic",
            "crop_pct": 0.85,
            "crop_mode": "squash",
            "mean": [0.48145466, 0.4578275, 0.40821073],
            "std": [0.26862954, 0.26130258, 0.27577711],
        },
        ["cat.jpg", "astronaut_rgba.png", "astronaut_portrait.png"],
    ),
    # crop_pct above 1 crops beyond the resized image: torchvision pads floor(missing / 2)
    # zeros before (HF pads ceil). Shortest edge floor(32 / 1.15) = 27, no mean or std given
    # (ImageNet's), no interpolation given (bicubic).
    "timm_crop_pct_1.15_32_padded": (
        {"input_size": [3, 32, 32], "crop_pct": 1.15},
        ["cat.jpg", "astronaut_portrait.png"],
    ),
}

# do_convert_rgb: HF's convert_to_rgb composites an image with a `transparency` colour onto
# white. After load_image's convert("RGB") only PNGs whose tRNS chunk names one colour still
# carry one (make_transparency_images writes each case Pillow distinguishes), so CLIP's class
# default (do_convert_rgb on) turns that colour white where ViT's (off) keeps it.
TRANSPARENCY_CONFIGS = {
    "clip_no_resize_transparency_1x4": (
        {
            "image_processor_type": "CLIPImageProcessor",
            "do_resize": False,
            "do_center_crop": False,
            "size": {"height": 1, "width": 4},
            "do_normalize": False,
        },
        "transparency",
    ),
    "vit_no_resize_transparency_1x4": (
        {"do_resize": False, "size": {"height": 1, "width": 4}, "do_normalize": False},
        "transparency",
    ),
}

# The processor class of each configuration not run through ViT's.
PROCESSOR_CLASSES = {
    "deit_fixed_72_crop_64": SlowDeiTImageProcessor,
    "clip_shortest_edge_56_crop_48": SlowCLIPImageProcessor,
    "clip_int_size_40_crop_43x36_padded": SlowCLIPImageProcessor,
    "bit_shortest_edge_33_crop_31": SlowBitImageProcessor,
    "no_resize_crop_64x111": SlowDeiTImageProcessor,
}

# For each EXIF orientation, the transpose that undoes what exif_transpose will apply, so
# that every file shows the same upright picture.
STORED_FOR_ORIENTATION = {
    1: None,
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_90,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_270,
}

# Configurations also run on one-channel ("L") images; the mean and std become one value.
ONE_CHANNEL_CONFIGS = {
    "bicubic_32_gray": (
        {"size": {"height": 32, "width": 32}, "resample": 3, "image_mean": [0.45], "image_std": [0.27]},
        ["cat.jpg", "camera_gray.png", "astronaut_rgba.png"],
    ),
}


def resized(array, width, height):
    """A small version of a scikit-image photo (made once here; not what the test measures)."""
    return Image.fromarray(array).resize((width, height), Image.Resampling.LANCZOS)


def make_images(out):
    """Writes the test images; returns their file names."""
    cat = resized(skimage.data.chelsea(), 240, 160)
    coffee = resized(skimage.data.coffee(), 150, 100)
    astronaut = resized(skimage.data.astronaut(), 120, 120)
    camera = resized(skimage.data.camera(), 96, 72)

    # JPEG, 4:2:0 chroma subsampling (PIL's default), as most photos are.
    cat.save(out / "cat.jpg", quality=90)

    # PNG RGB, smaller than 224 on both sides: the default config upscales it.
    coffee.save(out / "coffee.png", optimize=True)

    # PNG RGBA: alpha falls off from the centre and is 0 in the corners; the colour under a
    # transparent pixel is still there, and convert("RGB") keeps it.
    ys, xs = np.mgrid[0:120, 0:120]
    distance = np.hypot(ys - 59.5, xs - 59.5) / 60.0
    alpha = np.clip(255.0 * (1.3 - distance), 0, 255).astype(np.uint8)
    rgba = np.dstack([np.asarray(astronaut), alpha])
    Image.fromarray(rgba, "RGBA").save(out / "astronaut_rgba.png", optimize=True)

    # PNG grayscale ("L").
    camera.save(out / "camera_gray.png", optimize=True)

    # PNG palette ("P"), 64 colours.
    palette = resized(skimage.data.chelsea(), 150, 100).quantize(colors=64)
    palette.save(out / "cat_palette.png", optimize=True)

    # PNG P with one transparent palette index (a tRNS chunk), the most common one: with
    # do_convert_rgb on, HF turns its colour white.
    most_common = int(np.bincount(np.asarray(palette).ravel()).argmax())
    palette.save(out / "cat_palette_transparent_index.png", optimize=True, transparency=most_common)
    assert Image.open(out / "cat_palette_transparent_index.png").info["transparency"] == most_common

    # PNG RGB taller than wide, for the shortest edge's other branch; not in "all", so that
    # the older configurations keep their references.
    resized(skimage.data.astronaut(), 60, 90).save(out / "astronaut_portrait.png", optimize=True)

    # PNG RGB, 16 x 16, holding every byte value in each channel: red v, green 255 - v and blue
    # 97 v mod 256 at pixel v. Only configurations that leave it unresized use it.
    levels = np.arange(256, dtype=np.int64).reshape(16, 16)
    rgb = np.dstack([levels, 255 - levels, (97 * levels) % 256]).astype(np.uint8)
    Image.fromarray(rgb, "RGB").save(out / "levels_16.png")

    # WebP, lossy.
    resized(skimage.data.astronaut(), 160, 120).save(out / "astronaut.webp", quality=80)

    # JPEG whose pixels are stored turned a quarter to the left, with EXIF orientation 6
    # ("rotate 90 degrees clockwise to view"): the upright photo is 120 wide by 80 high.
    stored = resized(skimage.data.coffee(), 120, 80).transpose(Image.Transpose.ROTATE_90)
    exif = Image.Exif()
    exif[0x0112] = 6
    stored.save(out / "coffee_exif6.jpg", quality=90, exif=exif)
    upright = ImageOps.exif_transpose(Image.open(out / "coffee_exif6.jpg"))
    assert upright.size == (120, 80), upright.size

    return [
        "cat.jpg",
        "coffee.png",
        "astronaut_rgba.png",
        "camera_gray.png",
        "cat_palette.png",
        "astronaut.webp",
        "coffee_exif6.jpg",
    ]


def make_orientation_images(out):
    """Writes the same upright picture stored in each of the 8 EXIF orientations (JPEG), and
    in orientation 3 as PNG (eXIf chunk) and 8 as lossless WebP; returns the file names."""
    (out / "orientation").mkdir(exist_ok=True)
    upright = resized(skimage.data.chelsea(), 24, 16)
    names = []
    for orientation, undo in STORED_FOR_ORIENTATION.items():
        stored = upright if undo is None else upright.transpose(undo)
        exif = Image.Exif()
        exif[0x0112] = orientation
        name = f"orientation/exif_{orientation}.jpg"
        stored.save(out / name, quality=95, exif=exif)
        names.append(name)
    for orientation, name, options in (
        (3, "orientation/exif_3.png", {}),
        (8, "orientation/exif_8.webp", {"lossless": True}),
    ):
        exif = Image.Exif()
        exif[0x0112] = orientation
        upright.transpose(STORED_FOR_ORIENTATION[orientation]).save(out / name, exif=exif, **options)
        names.append(name)
    for name in names:
        assert ImageOps.exif_transpose(Image.open(out / name)).size == (24, 16), name
    return names


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def write_png(path, width, bit_depth, colour_type, samples, plte=None, trns=None):
    """A one-row PNG written chunk by chunk, for tRNS chunks and bit depths PIL does not write.
    `samples` are the row's values at `bit_depth` bits each."""
    if bit_depth == 16:
        row = struct.pack(f">{len(samples)}H", *samples)
    else:
        bits = "".join(format(v, f"0{bit_depth}b") for v in samples)
        bits += "0" * (-len(bits) % 8)
        row = bytes(int(bits[i : i + 8], 2) for i in range(0, len(bits), 8))
    ihdr = struct.pack(">IIBBBBB", width, 1, bit_depth, colour_type, 0, 0, 0)
    data = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr)
    if plte is not None:
        data += png_chunk(b"PLTE", plte)
    if trns is not None:
        data += png_chunk(b"tRNS", trns)
    data += png_chunk(b"IDAT", zlib.compress(b"\0" + row)) + png_chunk(b"IEND", b"")
    path.write_bytes(data)


def make_transparency_images(out):
    """Writes 4 x 1 PNGs with a tRNS chunk, one per case Pillow reads differently; returns
    their file names."""
    (out / "transparency").mkdir(exist_ok=True)
    grey, rgb, palette = 0, 2, 3
    plte = bytes([10, 20, 30, 200, 100, 50, 10, 20, 30, 0, 0, 0])
    u16 = lambda *values: struct.pack(f">{len(values)}H", *values)  # noqa: E731
    cases = {
        # Grey: the raw value against the 8-bit samples.
        "grey8_7.png": (8, grey, [0, 7, 200, 7], None, u16(7)),
        "grey8_300_clips_to_255.png": (8, grey, [0, 255, 200, 44], None, u16(300)),
        "grey4_0.png": (4, grey, [0, 15, 1, 2], None, u16(0)),
        "grey4_1_matches_nothing.png": (4, grey, [0, 15, 1, 2], None, u16(1)),
        "grey2_0.png": (2, grey, [0, 3, 1, 2], None, u16(0)),
        "grey1_0.png": (1, grey, [0, 1, 0, 1], None, u16(0)),
        # RGB: 16-bit values against the 8-bit samples (16-bit images keep their high bytes).
        "rgb8.png": (8, rgb, [1, 2, 3, 9, 9, 9, 1, 2, 3, 1, 2, 4], None, u16(1, 2, 3)),
        "rgb16_low_values.png": (
            16, rgb, [1, 2, 3, 0x102, 0x203, 0x304, 0x1FF, 0x2FF, 0x3FF, 5, 5, 5], None, u16(1, 2, 3)
        ),
        "rgb16_high_values_match_nothing.png": (
            16, rgb, [1, 2, 3, 0x102, 0x203, 0x304, 0x1FF, 0x2FF, 0x3FF, 5, 5, 5], None,
            u16(0x102, 0x203, 0x304),
        ),
        # Palette: one transparent index names a colour, which two entries share here.
        "palette8_index0.png": (8, palette, [0, 1, 2, 3], plte, bytes([0])),
        "palette8_index1.png": (8, palette, [0, 1, 2, 3], plte, bytes([255, 0])),
        "palette8_index_past_palette.png": (8, palette, [0, 1, 2, 3], plte, bytes([255] * 4 + [0])),
        "palette8_newline_after_index.png": (8, palette, [0, 1, 2, 3], plte, bytes([255, 0, 10])),
        "palette8_alpha_bytes.png": (8, palette, [0, 1, 2, 3], plte, bytes([255, 0, 128])),
        "palette8_two_transparent.png": (8, palette, [0, 1, 2, 3], plte, bytes([0, 0])),
        "palette2_index1.png": (2, palette, [0, 1, 2, 3], plte, bytes([255, 0])),
        "palette1_index0.png": (1, palette, [0, 1, 0, 1], plte[:6], bytes([0])),
    }
    names = []
    for file_name, (bit_depth, colour_type, samples, plte_, trns) in cases.items():
        name = f"transparency/{file_name}"
        write_png(out / name, 4, bit_depth, colour_type, samples, plte_, trns)
        names.append(name)
    return names


def load_as(path, mode):
    """`load_image` of transformers, generalised to the one-channel mode."""
    if mode == "RGB":
        return load_image(str(path))
    image = ImageOps.exif_transpose(Image.open(path))
    return image.convert(mode)


def processor_class(name, config):
    """The slow (PIL) class a configuration runs through: PROCESSOR_CLASSES's, else the one its
    image_processor_type (or 4.x feature_extractor_type) names, else ViT's."""
    if name in PROCESSOR_CLASSES:
        return PROCESSOR_CLASSES[name]
    type_name = config.get("image_processor_type") or config.get("feature_extractor_type")
    if type_name is None:
        return SlowViTImageProcessor
    class_name = type_name.replace("FeatureExtractor", "ImageProcessor")
    return getattr(transformers, class_name + "Pil")


def pixel_values(name, config, image):
    processor_class_ = processor_class(name, config)
    # The class is chosen above, as AutoImageProcessor would choose it from this key.
    kwargs = {
        k: v for k, v in config.items() if k not in ("image_processor_type", "feature_extractor_type")
    }
    processor = processor_class_(**kwargs)
    values = processor(images=image, return_tensors="np")["pixel_values"][0]
    return np.ascontiguousarray(values.astype(np.float32))


def timm_pixel_values(pretrained_cfg, image):
    """timm's eval transform of a PIL image, as TimmWrapperImageProcessor runs it."""
    data_config = timm.data.resolve_data_config(pretrained_cfg)
    transform = timm.data.create_transform(**data_config, is_training=False)
    return np.ascontiguousarray(transform(image).numpy().astype(np.float32))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = pathlib.Path(__file__).resolve().parent.parent
    parser.add_argument("--out", type=pathlib.Path, default=root / "tests/fixtures/images")
    out = parser.parse_args().out
    (out / "configs").mkdir(parents=True, exist_ok=True)
    # convert("RGB") of a palette image with one alpha byte per entry warns that it drops them,
    # which is the behaviour the references record.
    warnings.filterwarnings("ignore", message="Palette images with Transparency")

    images = make_images(out)
    orientation_images = make_orientation_images(out)
    transparency_images = make_transparency_images(out)
    tensors = {}
    all_configs = (
        (CONFIGS, "RGB"),
        (CLASS_DEFAULT_CONFIGS, "RGB"),
        (TRANSPARENCY_CONFIGS, "RGB"),
        (ONE_CHANNEL_CONFIGS, "L"),
    )
    for configs, mode in all_configs:
        for name, (config, applies_to) in configs.items():
            (out / "configs" / f"{name}.json").write_text(json.dumps(config, indent=2) + "\n")
            key_prefix = name if mode == "RGB" else f"{name}@1ch"
            if applies_to == "all":
                applies_to = images
            elif applies_to == "all+portrait":
                applies_to = images + ["astronaut_portrait.png"]
            elif applies_to == "orientation":
                applies_to = orientation_images
            elif applies_to == "transparency":
                applies_to = transparency_images
            for file_name in applies_to:
                image = load_as(out / file_name, mode)
                tensors[f"{key_prefix}/{file_name}"] = pixel_values(name, config, image)

    name, config, same_as = VIT_TYPE_ONLY
    (out / "configs" / f"{name}.json").write_text(json.dumps(config, indent=2) + "\n")
    for file_name in CONFIGS[same_as][1]:
        values = pixel_values(name, config, load_as(out / file_name, "RGB"))
        assert np.array_equal(values, tensors[f"{same_as}/{file_name}"]), (name, file_name)

    for name, (pretrained_cfg, applies_to) in TIMM_CONFIGS.items():
        # The part of a timm checkpoint's config.json that matters here.
        config_json = {"architecture": "vit_base_patch16_224", "num_classes": 1000, "pretrained_cfg": pretrained_cfg}
        (out / "configs" / f"{name}.json").write_text(json.dumps(config_json, indent=2) + "\n")
        if applies_to == "all+portrait":
            applies_to = images + ["astronaut_portrait.png"]
        for file_name in applies_to:
            tensors[f"{name}/{file_name}"] = timm_pixel_values(pretrained_cfg, load_as(out / file_name, "RGB"))

    versions = {
        "transformers": transformers.__version__,
        "pillow": PIL.__version__,
        "numpy": np.__version__,
        "scikit-image": skimage.__version__,
        "timm": timm.__version__,
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "processor_class": SlowViTImageProcessor.__name__,
        "crop_processor_classes": ", ".join(
            sorted({cls.__name__ for cls in PROCESSOR_CLASSES.values()})
        ),
        "class_default_processor_classes": ", ".join(
            sorted({processor_class(n, c).__name__ for n, (c, _) in CLASS_DEFAULT_CONFIGS.items()})
        ),
    }
    save_file(tensors, out / "reference_pixel_values.safetensors", metadata=versions)
    for key, value in sorted(tensors.items()):
        print(f"{key:50s} {tuple(value.shape)}")
    print(json.dumps(versions))


if __name__ == "__main__":
    main()
