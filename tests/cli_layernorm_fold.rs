//! The layernorms folded into the linear layers that read them (`vitrt_runtime::
//! layernorm_fold`), seen from the command line on the CPU's f16 emulation: `vitrt profile`
//! lists each node, so a folded graph shows `layernorm_linear` nodes and no block layernorm.
//! The runner folds a graph of one image only, never with batch invariance or in f32.

mod common;

use common::*;

/// The op table's node counts of one `vitrt profile` of the digits model, by op.
fn ops(extra: &[&str]) -> std::collections::HashMap<String, usize> {
    let dir = temp();
    let model = root().join("examples/digits-vit");
    let mut args = vec![
        "profile",
        "--model",
        model.to_str().unwrap(),
        "--device",
        "cpu",
        "--reps",
        "5",
        "--warmup",
        "1",
    ];
    args.extend_from_slice(extra);
    let o = vitrt(&args, dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    // "op  nodes  ms  share" rows, up to the blank line before the node table.
    out.lines()
        .skip_while(|l| !l.starts_with("op "))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| {
            let mut f = l.split_whitespace();
            let op = f.next().unwrap().to_string();
            (op, f.next().unwrap().parse().unwrap())
        })
        .collect()
}

#[test]
fn one_image_in_f16_runs_its_block_layernorms_inside_the_linear_layers() {
    let folded = ops(&["--dtype", "f16", "--batch-size", "1"]);
    // Four blocks: qkv and the first MLP layer of each; the first block's first layernorm
    // (whose input the patch embedding writes) and the last one stay.
    assert_eq!(folded.get("layernorm_linear"), Some(&7), "{folded:?}");
    assert_eq!(folded.get("layernorm"), Some(&2), "{folded:?}");
    for extra in [
        &["--dtype", "f16", "--batch-size", "2"][..],
        &["--dtype", "f16", "--batch-size", "1", "--batch-invariant"],
        &["--dtype", "f32", "--batch-size", "1"],
        &["--dtype", "f16", "--batch-size", "1", "--fusion", "none"],
        &["--dtype", "bf16", "--batch-size", "1"],
    ] {
        let plain = ops(extra);
        assert_eq!(plain.get("layernorm_linear"), None, "{extra:?}: {plain:?}");
        assert_eq!(plain.get("layernorm"), Some(&9), "{extra:?}: {plain:?}");
    }
}
