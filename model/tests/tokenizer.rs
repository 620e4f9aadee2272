//! The tokenizers of the zero-shot fixtures give transformers' ids (open_clip's fixtures:
//! open_clip's `SimpleTokenizer`'s): every string of their tokens.json and the prompts of their
//! text-reference.safetensors, truncated and padded to the text tower's context exactly as
//! `padding="max_length", truncation=True` does (open_clip: padded with 0).

use std::path::{Path, PathBuf};

use serde_json::Value;
use vitrt_model::{ModelError, TextFamily, TextTokenizer};

const FIXTURES: [(&str, TextFamily, usize); 5] = [
    ("clip-zero-shot", TextFamily::Clip, 77),
    ("siglip-zero-shot", TextFamily::Siglip, 64),
    // SigLIP 2's fixed-resolution checkpoints: a SiglipModel with Gemma's tokenizer.
    ("siglip2-zero-shot", TextFamily::Siglip, 64),
    ("open-clip-vit", TextFamily::OpenClip, 24),
    ("open-clip-quickgelu-avg", TextFamily::OpenClip, 24),
];

/// The fixtures of transformers' checkpoints (config.json with `text_config`).
const TRANSFORMERS_FIXTURES: &[(&str, TextFamily, usize)] =
    &[FIXTURES[0], FIXTURES[1], FIXTURES[2]];
/// The fixtures of open_clip's checkpoints (open_clip_config.json).
const OPEN_CLIP_FIXTURES: &[(&str, TextFamily, usize)] = &[FIXTURES[3], FIXTURES[4]];

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/models")
        .join(name)
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn ids_match_transformers_for_every_string_of_tokens_json() {
    for (name, family, context) in FIXTURES {
        let dir = fixture(name);
        let tokenizer = TextTokenizer::from_checkpoint(&dir, context, family).unwrap();
        let expected = read_json(&dir.join("tokens.json"));
        assert_eq!(expected["context"], context, "{name}");
        assert_eq!(expected["pad_id"], tokenizer.pad_id(), "{name}");
        assert_eq!(expected["end_id"], tokenizer.end_id(), "{name}");
        let cases = expected["cases"].as_array().unwrap();
        assert!(cases.len() >= 15, "{name}: {} cases", cases.len());
        let texts: Vec<String> = cases
            .iter()
            .map(|c| c["text"].as_str().unwrap().to_string())
            .collect();
        let batch = tokenizer.encode(&texts).unwrap();
        assert_eq!(batch.len(), texts.len());
        assert_eq!(batch.context, context);
        for (index, case) in cases.iter().enumerate() {
            let want: Vec<u32> = case["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|id| id.as_u64().unwrap() as u32)
                .collect();
            let text = &texts[index];
            assert_eq!(batch.row(index), want, "{name}: {text:?}");
            assert_eq!(
                batch.lengths[index] as u64,
                case["length"].as_u64().unwrap(),
                "{name}: {text:?}"
            );
        }
        // The set covers both ends: the empty string is its special tokens alone, and some
        // text fills the whole context, ending with the end token.
        let empty = texts.iter().position(|t| t.is_empty()).unwrap();
        let specials = match family {
            TextFamily::Clip | TextFamily::OpenClip => 2,
            TextFamily::Siglip => 1,
        };
        assert_eq!(batch.lengths[empty], specials, "{name}");
        let full = (0..batch.len())
            .find(|&i| batch.lengths[i] == context)
            .unwrap_or_else(|| panic!("{name}: no text is truncated"));
        assert_eq!(batch.row(full)[context - 1], tokenizer.end_id(), "{name}");
    }
}

#[test]
fn ids_match_the_input_ids_of_the_text_reference() {
    for (name, family, context) in FIXTURES {
        let dir = fixture(name);
        let tokenizer = TextTokenizer::from_checkpoint(&dir, context, family).unwrap();
        let bytes = std::fs::read(dir.join("text-reference.safetensors")).unwrap();
        let (_, metadata) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
        let prompts = metadata
            .metadata()
            .as_ref()
            .and_then(|m| m.get("prompts"))
            .unwrap_or_else(|| panic!("{name}: no prompts in the reference's metadata"));
        let prompts: Vec<String> = serde_json::from_str(prompts).unwrap();
        let tensors = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let input_ids = tensors.tensor("input_ids").unwrap();
        assert_eq!(input_ids.dtype(), safetensors::Dtype::I64, "{name}");
        assert_eq!(input_ids.shape(), [prompts.len(), context], "{name}");
        let want: Vec<u32> = input_ids
            .data()
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap()) as u32)
            .collect();
        let batch = tokenizer.encode(&prompts).unwrap();
        assert_eq!(batch.ids, want, "{name}");
        let mask = tensors.tensor("attention_mask").unwrap();
        let real: Vec<usize> = mask
            .data()
            .chunks_exact(8 * context)
            .map(|row| {
                row.chunks_exact(8)
                    .filter(|b| i64::from_le_bytes((*b).try_into().unwrap()) != 0)
                    .count()
            })
            .collect();
        assert_eq!(batch.lengths, real, "{name}");
    }
}

/// open_clip's tokenizer pads with 0 whatever tokenizer_config.json names, and its end token
/// is the highest id (the text tower pools at the highest id); the config's context and
/// vocabulary are the tokenizer's.
#[test]
fn open_clip_configs_and_tokenizers_agree() {
    for &(name, family, context) in OPEN_CLIP_FIXTURES {
        let dir = fixture(name);
        let tokenizer = TextTokenizer::from_checkpoint(&dir, context, family).unwrap();
        let config = read_json(&dir.join("open_clip_config.json"));
        let text = &config["model_cfg"]["text_cfg"];
        assert_eq!(text["context_length"], context, "{name}");
        assert_eq!(text["vocab_size"], tokenizer.vocab_size(), "{name}");
        assert_eq!(tokenizer.pad_id(), 0, "{name}");
        assert_eq!(
            tokenizer.end_id() as usize,
            tokenizer.vocab_size() - 1,
            "{name}"
        );
    }
}

/// Where open_clip's own tokenizer and the checkpoint's tokenizer.json disagree (open_clip's
/// text cleaning: ftfy and HTML unescaping; its special tokens' spelling), vitrt gives
/// tokenizer.json's ids, padded with 0: the differences docs/cli.md lists, each still there.
#[test]
fn open_clip_strings_its_text_cleaning_changes_get_tokenizer_json_ids() {
    for &(name, family, context) in OPEN_CLIP_FIXTURES {
        let dir = fixture(name);
        let tokenizer = TextTokenizer::from_checkpoint(&dir, context, family).unwrap();
        let expected = read_json(&dir.join("tokens.json"));
        let differences = expected["differences"].as_array().unwrap();
        let texts: Vec<String> = differences
            .iter()
            .map(|c| c["text"].as_str().unwrap().to_string())
            .collect();
        for want in ["&amp;", "<|endoftext|>", "<start_of_text>"] {
            assert!(
                texts.iter().any(|t| t.contains(want)),
                "{name}: no difference with {want}"
            );
        }
        let batch = tokenizer.encode(&texts).unwrap();
        let ids = |case: &Value, key: &str| -> Vec<u32> {
            case[key]
                .as_array()
                .unwrap()
                .iter()
                .map(|id| id.as_u64().unwrap() as u32)
                .collect()
        };
        for (index, case) in differences.iter().enumerate() {
            let text = &texts[index];
            assert_eq!(
                batch.row(index),
                ids(case, "tokenizer_json_ids"),
                "{name}: {text:?}"
            );
            assert_ne!(batch.row(index), ids(case, "ids"), "{name}: {text:?}");
        }
    }
}

#[test]
fn the_fixture_configs_name_the_tokenizers_end_and_pad_ids() {
    for &(name, family, context) in TRANSFORMERS_FIXTURES {
        let dir = fixture(name);
        let tokenizer = TextTokenizer::from_checkpoint(&dir, context, family).unwrap();
        let config = read_json(&dir.join("config.json"));
        let text = &config["text_config"];
        assert_eq!(text["max_position_embeddings"], context, "{name}");
        assert_eq!(text["eos_token_id"], tokenizer.end_id(), "{name}");
        assert_eq!(text["pad_token_id"], tokenizer.pad_id(), "{name}");
        assert_eq!(text["vocab_size"], tokenizer.vocab_size(), "{name}");
    }
}

#[test]
fn a_checkpoint_without_tokenizer_json_is_a_clear_error() {
    // A complete vision checkpoint that ships no tokenizer.
    let dir = fixture("clip-dual-tower");
    let error = TextTokenizer::from_checkpoint(&dir, 16, TextFamily::Clip).unwrap_err();
    assert!(matches!(error, ModelError::Tokenizer { .. }), "{error:?}");
    let text = error.to_string();
    assert!(text.contains("clip-dual-tower"), "{text}");
    assert!(text.contains("zero-shot"), "{text}");
}

#[test]
fn a_tokenizer_of_the_other_family_is_refused() {
    let error = TextTokenizer::from_checkpoint(&fixture("siglip-zero-shot"), 64, TextFamily::Clip)
        .unwrap_err()
        .to_string();
    assert!(error.contains("not a CLIP tokenizer"), "{error}");
    let error = TextTokenizer::from_checkpoint(&fixture("clip-zero-shot"), 77, TextFamily::Siglip)
        .unwrap_err()
        .to_string();
    assert!(error.contains("not a SigLIP tokenizer"), "{error}");
}

/// The siglip-zero-shot checkpoint as released SigLIP checkpoints are: its spiece.model and
/// tokenizer_config.json, no tokenizer.json.
fn spiece_only_checkpoint() -> tempfile::TempDir {
    let source = fixture("siglip-zero-shot");
    let dir = tempfile::tempdir().unwrap();
    for name in ["spiece.model", "tokenizer_config.json", "config.json"] {
        std::fs::copy(source.join(name), dir.path().join(name)).unwrap();
    }
    dir
}

#[test]
fn spiece_model_ids_match_the_slow_siglip_tokenizer_for_every_string() {
    let dir = spiece_only_checkpoint();
    assert!(!dir.path().join("tokenizer.json").exists());
    let tokenizer = TextTokenizer::from_checkpoint(dir.path(), 64, TextFamily::Siglip).unwrap();
    let expected = read_json(&fixture("siglip-zero-shot").join("spiece-tokens.json"));
    assert_eq!(expected["context"], 64);
    assert_eq!(expected["pad_id"], tokenizer.pad_id());
    assert_eq!(expected["end_id"], tokenizer.end_id());
    let cases = expected["cases"].as_array().unwrap();
    assert!(cases.len() >= 30, "{} cases", cases.len());
    let texts: Vec<String> = cases
        .iter()
        .map(|c| c["text"].as_str().unwrap().to_string())
        .collect();
    let batch = tokenizer.encode(&texts).unwrap();
    // Every string agrees, the special-token text too: the tokenizer built from spiece.model
    // reads SiglipTokenizer's "▁" + text, so unlike the fixture's tokenizer.json (see
    // ZERO-SHOT.md) it needs no normalizer rule that would also fire on the segments after a
    // special token.
    let mut mismatches = Vec::new();
    for (index, case) in cases.iter().enumerate() {
        let want: Vec<u32> = case["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|id| id.as_u64().unwrap() as u32)
            .collect();
        let length = case["length"].as_u64().unwrap() as usize;
        if batch.row(index) != want || batch.lengths[index] != length {
            mismatches.push(format!(
                "{:?}: ours {:?}, SiglipTokenizer's {:?}",
                texts[index],
                &batch.row(index)[..batch.lengths[index]],
                &want[..length]
            ));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

#[test]
fn spiece_model_prompts_match_the_text_reference_ids() {
    // The prompts of text-reference.safetensors give the same ids from spiece.model as from
    // the fixture's tokenizer.json (both are the reference model's input).
    let dir = spiece_only_checkpoint();
    let ours = TextTokenizer::from_checkpoint(dir.path(), 64, TextFamily::Siglip).unwrap();
    let fast = TextTokenizer::from_checkpoint(&fixture("siglip-zero-shot"), 64, TextFamily::Siglip)
        .unwrap();
    let prompts: Vec<String> = ["a photo of a cat.", "a photo of a dog.", "", "Two Birds!"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(
        ours.encode(&prompts).unwrap(),
        fast.encode(&prompts).unwrap()
    );
    assert_eq!(ours.vocab_size(), fast.vocab_size());
}

#[test]
fn a_truncated_or_garbage_spiece_model_is_a_clear_error() {
    let dir = spiece_only_checkpoint();
    let path = dir.path().join("spiece.model");
    let good = std::fs::read(&path).unwrap();
    let garbage: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    for bytes in [
        &good[..good.len() / 3],
        &good[..good.len() - 1],
        &garbage[..],
        &[][..],
    ] {
        std::fs::write(&path, bytes).unwrap();
        let error = TextTokenizer::from_checkpoint(dir.path(), 64, TextFamily::Siglip).unwrap_err();
        assert!(matches!(error, ModelError::Tokenizer { .. }), "{error:?}");
        let text = error.to_string();
        assert!(text.contains("spiece.model"), "{text}");
        assert!(
            text.contains("not a readable SentencePiece model"),
            "{text}"
        );
    }
}

#[test]
fn a_clip_checkpoint_with_spiece_model_but_no_tokenizer_json_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        fixture("siglip-zero-shot").join("spiece.model"),
        dir.path().join("spiece.model"),
    )
    .unwrap();
    let error = TextTokenizer::from_checkpoint(dir.path(), 77, TextFamily::Clip)
        .unwrap_err()
        .to_string();
    assert!(error.contains("no tokenizer.json"), "{error}");
    assert!(error.contains("has spiece.model"), "{error}");
    assert!(error.contains("zero-shot"), "{error}");
}

/// A copy of the siglip2-zero-shot checkpoint's tokenizer files with `tokenizer_config.json`
/// replaced.
fn gemma_checkpoint_with_config(config: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        fixture("siglip2-zero-shot").join("tokenizer.json"),
        dir.path().join("tokenizer.json"),
    )
    .unwrap();
    std::fs::write(dir.path().join("tokenizer_config.json"), config).unwrap();
    dir
}

/// Gemma's tokenizer class pads on the left unless its config says otherwise (SigLIP 2's
/// checkpoints say "right"), and takes `<pad>` as its pad token when the files name none.
#[test]
fn gemma_tokenizers_pad_on_the_side_transformers_pads() {
    let text = ["a photo of a cat.".to_string()];
    let right = gemma_checkpoint_with_config(
        r#"{"tokenizer_class": "GemmaTokenizer", "padding_side": "right"}"#,
    );
    let left = gemma_checkpoint_with_config(r#"{"tokenizer_class": "GemmaTokenizer"}"#);
    let right = TextTokenizer::from_checkpoint(right.path(), 16, TextFamily::Siglip).unwrap();
    let left = TextTokenizer::from_checkpoint(left.path(), 16, TextFamily::Siglip).unwrap();
    assert_eq!((right.pad_id(), right.end_id()), (0, 1));
    let right = right.encode(&text).unwrap();
    let left = left.encode(&text).unwrap();
    let length = right.lengths[0];
    assert_eq!(left.lengths[0], length);
    assert!(length > 1 && length < 16, "{length}");
    assert_eq!(right.ids[length - 1], 1, "{:?}", right.ids);
    assert_eq!(&right.ids[length..], &vec![0; 16 - length][..]);
    assert_eq!(&left.ids[..16 - length], &vec![0; 16 - length][..]);
    assert_eq!(&left.ids[16 - length..], &right.ids[..length]);
}

#[test]
fn a_padding_side_that_is_neither_left_nor_right_is_a_clear_error() {
    let dir = gemma_checkpoint_with_config(r#"{"padding_side": "middle"}"#);
    let error = TextTokenizer::from_checkpoint(dir.path(), 16, TextFamily::Siglip)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("padding_side") && error.contains("middle"),
        "{error}"
    );
}
