//! SentencePiece's `spiece.model`, the only tokenizer file released SigLIP checkpoints
//! (google/siglip-*) ship, and the tokenizer transformers' slow `SiglipTokenizer` makes of it,
//! rebuilt as a `tokenizers::Tokenizer`.
//!
//! The file is a serialized protobuf `ModelProto` (sentencepiece's model.proto). It is read
//! here with a small wire-format reader rather than a protobuf dependency: only a handful of
//! fields matter (the pieces with their scores and types, the model type, byte fallback and
//! the normalizer's precompiled character map), and every other field is skipped by its wire
//! type.

use serde_json::json;
use tokenizers::normalizers::replace::ReplacePattern;
use tokenizers::normalizers::{Lowercase, Precompiled, Replace, Sequence, Strip};
use tokenizers::{NormalizerWrapper, Tokenizer};

/// What SentencePiece makes of a piece (`ModelProto.SentencePiece.Type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PieceType {
    Normal,
    Unknown,
    Control,
    UserDefined,
    Unused,
    Byte,
}

impl PieceType {
    fn from_wire(value: u64) -> Option<PieceType> {
        Some(match value {
            1 => PieceType::Normal,
            2 => PieceType::Unknown,
            3 => PieceType::Control,
            4 => PieceType::UserDefined,
            5 => PieceType::Unused,
            6 => PieceType::Byte,
            _ => return None,
        })
    }
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Piece {
    pub text: String,
    pub score: f32,
    pub kind: PieceType,
}

/// The parts of `ModelProto` the tokenizer needs; proto2 defaults where a field is absent.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SpieceModel {
    /// In id order.
    pub pieces: Vec<Piece>,
    /// `TrainerSpec.model_type`: 1 Unigram, 2 BPE, 3 word, 4 char.
    pub model_type: u64,
    /// `TrainerSpec.byte_fallback`: unknown characters become their UTF-8 bytes' pieces.
    pub byte_fallback: bool,
    /// `NormalizerSpec.name` ("nmt_nfkc", "identity", ...), for messages.
    pub normalizer_name: String,
    /// `NormalizerSpec.precompiled_charsmap`: the compiled normalization rules (empty for
    /// "identity").
    pub precompiled_charsmap: Vec<u8>,
}

const UNIGRAM: u64 = 1;

impl SpieceModel {
    /// Parses a serialized `ModelProto`. Errors say what is wrong and at which byte.
    pub(crate) fn parse(bytes: &[u8]) -> Result<SpieceModel, String> {
        let mut model = SpieceModel {
            pieces: Vec::new(),
            model_type: UNIGRAM,
            byte_fallback: false,
            normalizer_name: String::new(),
            precompiled_charsmap: Vec::new(),
        };
        let mut reader = Reader::new(bytes, 0);
        while let Some((field, value)) = reader.next_field()? {
            match field {
                1 => {
                    let (body, at) = value.bytes(field, "ModelProto.pieces")?;
                    let index = model.pieces.len();
                    model.pieces.push(parse_piece(body, at, index)?);
                }
                2 => {
                    let (body, at) = value.bytes(field, "ModelProto.trainer_spec")?;
                    let mut spec = Reader::new(body, at);
                    while let Some((field, value)) = spec.next_field()? {
                        match field {
                            3 => {
                                model.model_type = value.varint(field, "TrainerSpec.model_type")?
                            }
                            35 => {
                                model.byte_fallback =
                                    value.varint(field, "TrainerSpec.byte_fallback")? != 0
                            }
                            _ => {}
                        }
                    }
                }
                3 => {
                    let (body, at) = value.bytes(field, "ModelProto.normalizer_spec")?;
                    let mut spec = Reader::new(body, at);
                    while let Some((field, value)) = spec.next_field()? {
                        match field {
                            1 => {
                                let (name, at) = value.bytes(field, "NormalizerSpec.name")?;
                                model.normalizer_name = utf8(name, at, "NormalizerSpec.name")?;
                            }
                            2 => {
                                let (map, _) =
                                    value.bytes(field, "NormalizerSpec.precompiled_charsmap")?;
                                model.precompiled_charsmap = map.to_vec();
                            }
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        if model.pieces.is_empty() {
            return Err("no pieces: not a SentencePiece model".to_string());
        }
        if model.model_type != UNIGRAM {
            let name = match model.model_type {
                2 => "BPE",
                3 => "word",
                4 => "char",
                _ => "unknown",
            };
            return Err(format!(
                "a {name} SentencePiece model (model_type {}); vitrt reads Unigram models only",
                model.model_type
            ));
        }
        Ok(model)
    }

    /// The id of the piece of type UNKNOWN (SentencePiece requires exactly one).
    pub(crate) fn unk_id(&self) -> Result<usize, String> {
        let mut unknown = self
            .pieces
            .iter()
            .enumerate()
            .filter(|(_, p)| p.kind == PieceType::Unknown)
            .map(|(id, _)| id);
        match (unknown.next(), unknown.next()) {
            (Some(id), None) => Ok(id),
            (None, _) => Err("no piece of type UNKNOWN".to_string()),
            (Some(first), Some(second)) => Err(format!(
                "more than one piece of type UNKNOWN (ids {first} and {second})"
            )),
        }
    }

    pub(crate) fn id_of(&self, text: &str) -> Option<usize> {
        self.pieces.iter().position(|p| p.text == text)
    }
}

fn parse_piece(bytes: &[u8], offset: usize, index: usize) -> Result<Piece, String> {
    let mut text = None;
    let mut score = 0.0;
    let mut kind = PieceType::Normal;
    let mut reader = Reader::new(bytes, offset);
    while let Some((field, value)) = reader.next_field()? {
        match field {
            1 => {
                let (body, at) = value.bytes(field, "SentencePiece.piece")?;
                text = Some(utf8(body, at, "SentencePiece.piece")?);
            }
            2 => score = f32::from_bits(value.fixed32(field, "SentencePiece.score")?),
            3 => {
                let raw = value.varint(field, "SentencePiece.type")?;
                kind = PieceType::from_wire(raw).ok_or_else(|| {
                    format!("piece {index} has type {raw}, not a SentencePiece piece type")
                })?;
            }
            _ => {}
        }
    }
    let text = text.ok_or_else(|| format!("piece {index} has no text"))?;
    if text.is_empty() {
        return Err(format!("piece {index} is the empty string"));
    }
    if !score.is_finite() {
        return Err(format!("piece {index} ({text:?}) has the score {score}"));
    }
    Ok(Piece { text, score, kind })
}

fn utf8(bytes: &[u8], offset: usize, what: &str) -> Result<String, String> {
    String::from_utf8(bytes.to_vec())
        .map_err(|_| format!("{what} at byte {offset} is not UTF-8 text"))
}

/// A field's value as the wire carries it, with the file offset of its payload.
enum WireValue<'a> {
    Varint(u64),
    Fixed64,
    Bytes(&'a [u8], usize),
    Fixed32(u32),
}

impl<'a> WireValue<'a> {
    fn mismatch(&self, field: u32, what: &str, want: &str) -> String {
        let got = match self {
            WireValue::Varint(_) => "a varint",
            WireValue::Fixed64 => "a 64-bit value",
            WireValue::Bytes(..) => "length-delimited bytes",
            WireValue::Fixed32(_) => "a 32-bit value",
        };
        format!("{what} (field {field}) is {got}, not {want}")
    }

    fn varint(&self, field: u32, what: &str) -> Result<u64, String> {
        match self {
            WireValue::Varint(v) => Ok(*v),
            _ => Err(self.mismatch(field, what, "a varint")),
        }
    }

    fn fixed32(&self, field: u32, what: &str) -> Result<u32, String> {
        match self {
            WireValue::Fixed32(v) => Ok(*v),
            _ => Err(self.mismatch(field, what, "a 32-bit value")),
        }
    }

    fn bytes(&self, field: u32, what: &str) -> Result<(&'a [u8], usize), String> {
        match self {
            WireValue::Bytes(b, at) => Ok((b, *at)),
            _ => Err(self.mismatch(field, what, "length-delimited bytes")),
        }
    }
}

/// Protobuf wire-format fields of one message, in order. `base` is the message's offset in
/// the file, so errors name file offsets.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    base: usize,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8], base: usize) -> Reader<'a> {
        Reader {
            bytes,
            pos: 0,
            base,
        }
    }

    fn at(&self) -> usize {
        self.base + self.pos
    }

    fn varint(&mut self) -> Result<u64, String> {
        let start = self.at();
        let mut value = 0u64;
        // At most 10 bytes of 7 bits each encode a u64.
        for shift in (0..70).step_by(7) {
            let byte = *self
                .bytes
                .get(self.pos)
                .ok_or_else(|| format!("truncated: a varint at byte {start} runs past the end"))?;
            self.pos += 1;
            if shift == 63 && byte > 1 {
                return Err(format!("the varint at byte {start} overflows 64 bits"));
            }
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(format!(
            "the varint at byte {start} is longer than 10 bytes"
        ))
    }

    fn take(&mut self, count: usize, what: &str) -> Result<(&'a [u8], usize), String> {
        let at = self.at();
        let left = self.bytes.len() - self.pos;
        if count > left {
            return Err(format!(
                "truncated: {what} at byte {at} needs {count} bytes, {left} are left"
            ));
        }
        let slice = &self.bytes[self.pos..self.pos + count];
        self.pos += count;
        Ok((slice, at))
    }

    /// The next field's number and value; `None` at the end of the message.
    fn next_field(&mut self) -> Result<Option<(u32, WireValue<'a>)>, String> {
        if self.pos == self.bytes.len() {
            return Ok(None);
        }
        let at = self.at();
        let key = self.varint()?;
        let field = key >> 3;
        if field == 0 || field > u64::from(u32::MAX >> 3) {
            return Err(format!("invalid field number {field} at byte {at}"));
        }
        let field = field as u32;
        let value = match key & 7 {
            0 => WireValue::Varint(self.varint()?),
            1 => {
                self.take(8, "a 64-bit value")?;
                WireValue::Fixed64
            }
            2 => {
                let length = self.varint()?;
                let length = usize::try_from(length).unwrap_or(usize::MAX);
                let (body, body_at) = self.take(length, "a length-delimited field")?;
                WireValue::Bytes(body, body_at)
            }
            5 => {
                let (b, _) = self.take(4, "a 32-bit value")?;
                WireValue::Fixed32(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            }
            wire => {
                return Err(format!(
                    "field {field} at byte {at} has wire type {wire}, which SentencePiece models \
                     never use"
                ))
            }
        };
        Ok(Some((field, value)))
    }
}

/// Python's `string.punctuation`, the ASCII punctuation SiglipTokenizer removes, as a regex
/// character class body (every character escaped).
const PUNCTUATION: &str = r##"\!\"\#\$\%\&\'\(\)\*\+\,\-\.\/\:\;\<\=\>\?\@\[\\\]\^\_\`\{\|\}\~"##;

fn replace(pattern: ReplacePattern, content: &str) -> Result<NormalizerWrapper, String> {
    Replace::new(pattern, content)
        .map(NormalizerWrapper::from)
        .map_err(|e| format!("building the normalizer: {e}"))
}

/// SiglipTokenizer's input to its pipeline: "▁" + the text, the text's own "▁" turned into
/// spaces. The tokenizer [`siglip_tokenizer`] builds reads texts made by this.
pub(crate) fn siglip_text(text: &str) -> String {
    format!("\u{2581}{}", text.replace('\u{2581}', " "))
}

/// The tokenizer transformers' `SiglipTokenizer` makes of `model`, giving its ids for texts
/// made by [`siglip_text`]:
///
/// - `</s>`, the UNKNOWN piece and the pad token are special tokens found in the text, eating
///   the spaces around them, as SiglipTokenizer declares them; the text between them is
///   tokenized segment by segment, the first one starting with siglip_text's "▁".
/// - Each segment, in Python: lowercased (`lowercase`, its `do_lower_case`), ASCII
///   punctuation removed, whitespace runs collapsed to one space and stripped; then
///   SentencePiece applies the model's normalization rules (its precompiled NFKC-based
///   charsmap: full-width letters to ASCII, ligatures split, ...) and collapses the spaces
///   they may add. The normalizer below does the same in the same order. A first segment
///   left with its "▁" alone gives no piece (SentencePiece strips it as trailing whitespace,
///   or SiglipTokenizer drops it before a special token).
/// - Metaspace turns spaces into "▁" and splits before each, prepending nothing (the first
///   segment's "▁" is already there; the others have none, as SentencePiece's dummy prefix
///   goes to the `<unk>` SiglipTokenizer puts before each segment and strips off).
/// - The Unigram model of the pieces and scores, unknown text the UNKNOWN piece;
/// - `</s>` after the text.
///
/// `pad_token` is the checkpoint's pad token (SiglipTokenizer's default is `</s>`).
pub(crate) fn siglip_tokenizer(
    model: &SpieceModel,
    lowercase: bool,
    end_token: &str,
    pad_token: &str,
) -> Result<Tokenizer, String> {
    let unk_id = model.unk_id()?;
    let end_id = model
        .id_of(end_token)
        .ok_or_else(|| format!("no {end_token} piece in the vocabulary: not a SigLIP tokenizer"))?;
    let mut specials = vec![end_id, unk_id];
    if let Some(pad_id) = model.id_of(pad_token) {
        if !specials.contains(&pad_id) {
            specials.push(pad_id);
        }
    }
    specials.sort_unstable();
    let added_tokens: Vec<_> = specials
        .iter()
        .map(|&id| {
            json!({
                "id": id, "content": model.pieces[id].text, "single_word": false,
                "lstrip": true, "rstrip": true, "normalized": false, "special": true,
            })
        })
        .collect();
    let vocab: Vec<_> = model
        .pieces
        .iter()
        .map(|p| json!([p.text, p.score]))
        .collect();
    let sequence = |id: &str| json!({"Sequence": {"id": id, "type_id": 0}});
    let end = json!({"SpecialToken": {"id": end_token, "type_id": 0}});
    let document = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added_tokens,
        "normalizer": null,
        "pre_tokenizer": {
            "type": "Metaspace", "replacement": "\u{2581}", "prepend_scheme": "never",
            "split": true,
        },
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [sequence("A"), end],
            "pair": [sequence("A"), end, sequence("B"), end],
            "special_tokens": {
                end_token: {"id": end_token, "ids": [end_id], "tokens": [end_token]},
            },
        },
        "decoder": {
            "type": "Metaspace", "replacement": "\u{2581}", "prepend_scheme": "first",
            "split": true,
        },
        "model": {
            "type": "Unigram",
            "unk_id": unk_id,
            "vocab": vocab,
            "byte_fallback": model.byte_fallback,
        },
    });
    let mut tokenizer: Tokenizer = document
        .to_string()
        .parse()
        .map_err(|e| format!("the tokenizer made of its pieces is refused: {e}"))?;

    let mut steps = Vec::new();
    if lowercase {
        steps.push(Lowercase.into());
    }
    steps.push(replace(
        ReplacePattern::Regex(format!("[{PUNCTUATION}]")),
        "",
    )?);
    steps.push(replace(ReplacePattern::Regex(r"\s+".into()), " ")?);
    steps.push(Strip::new(true, true).into());
    if !model.precompiled_charsmap.is_empty() {
        check_charsmap(&model.precompiled_charsmap).map_err(|e| {
            format!(
                "the normalizer's precompiled charsmap ({:?}) is malformed: {e}",
                model.normalizer_name
            )
        })?;
        let charsmap = Precompiled::from(&model.precompiled_charsmap).map_err(|e| {
            format!(
                "the normalizer's precompiled charsmap ({:?}) is not readable: {e}",
                model.normalizer_name
            )
        })?;
        steps.push(charsmap.into());
        // SentencePiece's remove_extra_whitespaces after its rules: a space the rules add
        // (NFKC's " \u{308}" for "¨") joins its neighbour into one, and none ends the text.
        steps.push(replace(ReplacePattern::Regex(" {2,}".into()), " ")?);
        steps.push(Strip::new(false, true).into());
    }
    // A first segment left with siglip_text's "▁" alone gives no piece.
    steps.push(replace(ReplacePattern::Regex("\\A\u{2581}\\z".into()), "")?);
    tokenizer.with_normalizer(Some(Sequence::new(steps)));
    Ok(tokenizer)
}

/// Checks that every lookup the `tokenizers` crate's Precompiled normalizer can make in
/// `charsmap` stays in bounds, so that a corrupt file is refused here rather than panicking
/// while a text is encoded.
///
/// The charsmap is a little-endian u32 byte size of a trie, the trie (a darts-clone double
/// array of u32 units), then the replacement strings, each ended by a NUL. A lookup starts at
/// the root unit's offset, and for each input byte `c` moves to `state ^ c`, whose unit must
/// carry the label `c`; that unit's offset leads to the next state, and when it has a leaf,
/// the unit at that state holds the byte index of a replacement string. Every state reachable
/// from the root is visited once.
fn check_charsmap(charsmap: &[u8]) -> Result<(), String> {
    let header: [u8; 4] = charsmap
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .ok_or("shorter than its 4-byte header")?;
    let trie_bytes = u32::from_le_bytes(header) as usize;
    if !trie_bytes.is_multiple_of(4) || trie_bytes == 0 || trie_bytes > charsmap.len() - 4 {
        return Err(format!(
            "a trie of {trie_bytes} bytes does not fit the {} bytes after the header",
            charsmap.len() - 4
        ));
    }
    let units: Vec<usize> = charsmap[4..4 + trie_bytes]
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .collect();
    let strings = std::str::from_utf8(&charsmap[4 + trie_bytes..])
        .map_err(|_| "its replacement strings are not UTF-8 text".to_string())?;
    let offset = |unit: usize| (unit >> 10) << ((unit & (1 << 9)) >> 6);
    let label = |unit: usize| unit & ((1 << 31) | 0xff);
    let has_leaf = |unit: usize| (unit >> 8) & 1 == 1;
    let value = |unit: usize| unit & ((1 << 31) - 1);

    let mut seen = vec![false; units.len()];
    let mut pending = vec![offset(units[0])];
    while let Some(state) = pending.pop() {
        for c in 1..=255usize {
            let child = state ^ c;
            let unit = *units.get(child).ok_or_else(|| {
                format!(
                    "the trie's state {state} leads past its {} units",
                    units.len()
                )
            })?;
            if label(unit) != c {
                continue;
            }
            let next = child ^ offset(unit);
            if has_leaf(unit) {
                let leaf = *units.get(next).ok_or_else(|| {
                    format!(
                        "a leaf at unit {next} is past the trie's {} units",
                        units.len()
                    )
                })?;
                if !strings.is_char_boundary(value(leaf)) {
                    return Err(format!(
                        "a replacement at byte {} is outside its {} bytes of strings",
                        value(leaf),
                        strings.len()
                    ));
                }
            }
            // A state past the end is refused when visited, as any byte read there would be.
            if next >= units.len() {
                return Err(format!("the trie's unit {child} leads past its units"));
            }
            if !seen[next] {
                seen[next] = true;
                pending.push(next);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(mut value: u64, out: &mut Vec<u8>) {
        loop {
            let byte = (value & 0x7f) as u8;
            value >>= 7;
            if value == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }

    fn bytes_field(field: u64, body: &[u8], out: &mut Vec<u8>) {
        varint(field << 3 | 2, out);
        varint(body.len() as u64, out);
        out.extend_from_slice(body);
    }

    fn piece(text: &str, score: f32, kind: u64) -> Vec<u8> {
        let mut out = Vec::new();
        bytes_field(1, text.as_bytes(), &mut out);
        varint(2 << 3 | 5, &mut out);
        out.extend_from_slice(&score.to_le_bytes());
        varint(3 << 3, &mut out);
        varint(kind, &mut out);
        out
    }

    /// A small Unigram model: <pad>, </s>, <unk>, then a few pieces, with a trainer spec and
    /// an identity normalizer spec (and an unknown field, which must be skipped).
    fn model_bytes() -> Vec<u8> {
        let mut out = Vec::new();
        let pieces: [(&str, f32, u64); 8] = [
            ("<pad>", 0.0, 3),
            ("</s>", 0.0, 3),
            ("<unk>", 0.0, 2),
            ("\u{2581}", -2.0, 1),
            ("\u{2581}a", -1.0, 1),
            ("\u{2581}cat", -1.5, 1),
            ("c", -3.0, 1),
            ("a", -3.0, 1),
        ];
        for (text, score, kind) in pieces {
            bytes_field(1, &piece(text, score, kind), &mut out);
        }
        let mut trainer = Vec::new();
        varint(3 << 3, &mut trainer);
        varint(1, &mut trainer);
        varint(40 << 3, &mut trainer); // unk_id, read from the pieces instead
        varint(2, &mut trainer);
        bytes_field(2, &trainer, &mut out);
        let mut normalizer = Vec::new();
        bytes_field(1, b"identity", &mut normalizer);
        bytes_field(3, &normalizer, &mut out);
        // An unknown fixed64 field.
        varint(9 << 3 | 1, &mut out);
        out.extend_from_slice(&[0; 8]);
        out
    }

    #[test]
    fn parses_pieces_scores_types_and_specs() {
        let model = SpieceModel::parse(&model_bytes()).unwrap();
        assert_eq!(model.pieces.len(), 8);
        assert_eq!(model.pieces[1].text, "</s>");
        assert_eq!(model.pieces[1].kind, PieceType::Control);
        assert_eq!(model.pieces[5].score, -1.5);
        assert_eq!(model.unk_id().unwrap(), 2);
        assert_eq!(model.normalizer_name, "identity");
        assert!(model.precompiled_charsmap.is_empty());
        assert!(!model.byte_fallback);
    }

    #[test]
    fn builds_a_tokenizer_that_appends_the_end_token() {
        let model = SpieceModel::parse(&model_bytes()).unwrap();
        let tokenizer = siglip_tokenizer(&model, true, "</s>", "</s>").unwrap();
        let ids = tokenizer.encode(siglip_text("A, Cat!"), true).unwrap();
        assert_eq!(ids.get_ids(), [4, 5, 1]);
    }

    #[test]
    fn every_truncation_is_a_clear_error_never_a_panic() {
        let bytes = model_bytes();
        for end in 0..bytes.len() {
            // Every prefix either parses (it ends between fields) or says what is wrong.
            match SpieceModel::parse(&bytes[..end]) {
                Ok(model) => assert!(!model.pieces.is_empty()),
                Err(message) => assert!(!message.is_empty()),
            }
        }
        let message = SpieceModel::parse(&bytes[..bytes.len() / 2]).unwrap_err();
        assert!(message.contains("truncated"), "{message}");
        assert!(SpieceModel::parse(&[]).unwrap_err().contains("no pieces"));
    }

    #[test]
    fn garbage_is_a_clear_error_never_a_panic() {
        // A deterministic pseudo-random stream, and single-byte corruptions of a good file.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for length in [1, 2, 5, 17, 100, 1000] {
            let bytes: Vec<u8> = (0..length).map(|_| next() as u8).collect();
            let _ = SpieceModel::parse(&bytes);
        }
        let good = model_bytes();
        for index in 0..good.len() {
            for value in [0x00, 0x7f, 0x80, 0xff, 0x0b, 0x0f] {
                let mut bytes = good.clone();
                bytes[index] = value;
                if let Ok(model) = SpieceModel::parse(&bytes) {
                    // What parses either builds a tokenizer or says why not.
                    let _ = siglip_tokenizer(&model, true, "</s>", "</s>");
                }
            }
        }
        let message = SpieceModel::parse(b"\x0b").unwrap_err();
        assert!(message.contains("wire type 3"), "{message}");
        let message = SpieceModel::parse(&[0x08, 0xff, 0xff]).unwrap_err();
        assert!(message.contains("varint"), "{message}");
    }

    #[test]
    fn wrong_models_are_refused_by_name() {
        let mut bytes = model_bytes();
        let mut trainer = Vec::new();
        varint(3 << 3, &mut trainer);
        varint(2, &mut trainer);
        bytes_field(2, &trainer, &mut bytes);
        let message = SpieceModel::parse(&bytes).unwrap_err();
        assert!(message.contains("BPE"), "{message}");

        let mut bytes = Vec::new();
        bytes_field(1, &piece("a", -1.0, 1), &mut bytes);
        let model = SpieceModel::parse(&bytes).unwrap();
        let message = siglip_tokenizer(&model, true, "</s>", "</s>").unwrap_err();
        assert!(message.contains("UNKNOWN"), "{message}");
        bytes_field(1, &piece("<unk>", 0.0, 2), &mut bytes);
        let model = SpieceModel::parse(&bytes).unwrap();
        let message = siglip_tokenizer(&model, true, "</s>", "</s>").unwrap_err();
        assert!(message.contains("not a SigLIP tokenizer"), "{message}");

        let mut bytes = Vec::new();
        bytes_field(1, &piece("a", -1.0, 9), &mut bytes);
        let message = SpieceModel::parse(&bytes).unwrap_err();
        assert!(message.contains("type 9"), "{message}");
    }

    /// The nmt_nfkc charsmap of the siglip-zero-shot fixture's spiece.model.
    fn fixture_charsmap() -> Vec<u8> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/models/siglip-zero-shot/spiece.model");
        let model = SpieceModel::parse(&std::fs::read(path).unwrap()).unwrap();
        assert_eq!(model.normalizer_name, "nmt_nfkc");
        model.precompiled_charsmap
    }

    #[test]
    fn a_corrupt_charsmap_is_refused_before_it_can_panic() {
        let good = fixture_charsmap();
        check_charsmap(&good).unwrap();
        assert!(check_charsmap(&good[..3]).unwrap_err().contains("header"));
        let mut big = good.clone();
        big[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(check_charsmap(&big).unwrap_err().contains("does not fit"));
        assert!(check_charsmap(&good[..good.len() / 2]).is_err());

        // Texts that reach many of the trie's paths: full-width and compatibility forms,
        // accents, CJK, emoji, control characters.
        let texts: Vec<String> = (0..40)
            .map(|block| {
                (0..200u32)
                    .filter_map(|i| char::from_u32(block * 0x80 + i * 7 + 1))
                    .chain("ＡＢＣ ﬁ ① ½ ™ ㎏ e\u{301} 東京 🙂 \u{3000}\u{200b}".chars())
                    .collect()
            })
            .collect();
        let base = SpieceModel::parse(&model_bytes()).unwrap();
        let trie_units = u32::from_le_bytes(good[..4].try_into().unwrap()) as usize / 4;
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..60 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            // Corrupt one unit of the trie (or a byte of the strings after it).
            let mut bytes = good.clone();
            let at = 4 + (state as usize % (trie_units + 64)) * 4;
            let at = at.min(bytes.len() - 4);
            bytes[at..at + 4].copy_from_slice(&((state >> 32) as u32).to_le_bytes());
            let model = SpieceModel {
                precompiled_charsmap: bytes,
                ..base.clone()
            };
            // Refused, or safe on every text.
            if let Ok(tokenizer) = siglip_tokenizer(&model, true, "</s>", "</s>") {
                for text in &texts {
                    tokenizer.encode(siglip_text(text), true).unwrap();
                }
            }
        }
    }
}
