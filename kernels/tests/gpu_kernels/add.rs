//! Elementwise add (and into an f32 residual stream) against its twin, exactly.

use super::*;
use vitrt_kernels::add;

#[test]
#[ignore = "needs a CUDA GPU"]
fn add_matches_its_twin_exactly() {
    let mut rng = SmallRng::seed_from_u64(4);
    for dtype in DType::ALL {
        let mut cases = 0;
        for &n in &[
            1usize,
            7,
            197,
            198,
            257,
            1000,
            8191,
            8192,
            8193,
            (1 << 20) + 3,
        ] {
            for misalign in [0, 1] {
                let case = format!("add {dtype} n {n} misalign {misalign}");
                let a = random(&mut rng, n, -10.0, 10.0, dtype);
                let b = random(&mut rng, n, -10.0, 10.0, dtype);
                let (_ab, av) = upload(gpu(), dtype, &a, misalign);
                let (_bb, bv) = upload(gpu(), dtype, &b, 0);
                let out = Poisoned::new(gpu(), dtype, n, misalign);
                add::gpu::add(gpu(), dtype, av, bv, n, out.view()).unwrap();
                let got = out.read(gpu(), &case);
                let mut want = vec![0.0; n];
                add::cpu::add(&a, &b, &mut want);
                want.iter_mut().for_each(|v| *v = dtype.round(*v));
                compare(&case, &got, &want, 0.0, 0.0);
                cases += 1;
            }
        }
        // In place, as a residual add: out is a.
        let n = 12_345;
        let a = random(&mut rng, n, -10.0, 10.0, dtype);
        let b = random(&mut rng, n, -10.0, 10.0, dtype);
        let (ab, av) = upload(gpu(), dtype, &a, 0);
        let (_bb, bv) = upload(gpu(), dtype, &b, 0);
        add::gpu::add(gpu(), dtype, av, bv, n, av).unwrap();
        let mut bytes = vec![0u8; ab.len_bytes()];
        gpu().download(&ab, 0, &mut bytes).unwrap();
        let mut want = vec![0.0; n];
        add::cpu::add(&a, &b, &mut want);
        want.iter_mut().for_each(|v| *v = dtype.round(*v));
        compare(
            &format!("in-place add {dtype}"),
            &dtype.decode(&bytes),
            &want,
            0.0,
            0.0,
        );
        report("add", dtype, cases + 1, Worst::default());
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn add_into_an_f32_stream_matches_its_twin_exactly() {
    // A half-precision branch added into an f32 residual stream, either operand order, out of
    // place and in place (out = the stream). The twin adds the same values in f32: exact.
    let mut rng = SmallRng::seed_from_u64(6);
    for dtype in [DType::F16, DType::BF16] {
        let mut cases = 0;
        for &n in &[1usize, 7, 197, 1000, 8193, (1 << 20) + 3] {
            for misalign in [0, 1] {
                for stream_first in [true, false] {
                    for in_place in [false, true] {
                        let case = format!(
                            "add {dtype} into f32 n {n} misalign {misalign} stream first \
                             {stream_first} in place {in_place}"
                        );
                        let stream = random(&mut rng, n, -10.0, 10.0, DType::F32);
                        let branch = random(&mut rng, n, -10.0, 10.0, dtype);
                        let (sb, sv) = upload(gpu(), DType::F32, &stream, misalign);
                        let (_bb, bv) = upload(gpu(), dtype, &branch, 0);
                        let (a, b) = if stream_first { (sv, bv) } else { (bv, sv) };
                        let out = Poisoned::new(gpu(), DType::F32, n, misalign);
                        let target = if in_place { sv } else { out.view() };
                        add::gpu::add(gpu(), dtype, a, b, n, target).unwrap();
                        let got = if in_place {
                            let mut bytes = vec![0u8; sb.len_bytes()];
                            gpu().download(&sb, 0, &mut bytes).unwrap();
                            let start = misalign * 4;
                            DType::F32.decode(&bytes[start..start + n * 4])
                        } else {
                            out.read(gpu(), &case)
                        };
                        let mut want = vec![0.0; n];
                        add::cpu::add(&stream, &branch, &mut want);
                        compare(&case, &got, &want, 0.0, 0.0);
                        cases += 1;
                    }
                }
            }
        }
        report("add into f32", dtype, cases, Worst::default());
    }
}
