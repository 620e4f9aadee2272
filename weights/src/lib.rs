//! Checkpoint files: safetensors through mmap (single and sharded), stored dtypes, hub resolution.
