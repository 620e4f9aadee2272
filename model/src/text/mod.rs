//! Text input of the dual-tower families (CLIP, SigLIP): turning label prompts into the token
//! ids their text towers read.

mod tokenizer;

pub use tokenizer::{TextFamily, TextTokenizer, TokenBatch};
