//! The reusable `ImageLoader` and the normalisation table: reuse gives what fresh loaders give,
//! the table path gives what `preprocess_file` gives, and the limits refuse images and files
//! before reading or decoding them whole.

use std::path::{Path, PathBuf};

use vitrt_model::preprocess::{
    normalization_table, normalize_into, preprocess_bytes, preprocess_file, ImageLimits,
    ImageLoader, PreprocessConfig, PreprocessError, MAX_IMAGE_PIXELS, PIL_MAX_IMAGE_PIXELS,
};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/images")
}

/// Every image among the fixtures (the orientation ones included), sorted.
fn fixture_images() -> Vec<PathBuf> {
    let mut images = Vec::new();
    for dir in [fixtures(), fixtures().join("orientation")] {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let ext = path.extension().map(|e| e.to_string_lossy().to_lowercase());
            if matches!(ext.as_deref(), Some("jpg" | "jpeg" | "png" | "webp")) {
                images.push(path);
            }
        }
    }
    images.sort();
    assert!(images.len() >= 7, "only {} fixture images", images.len());
    images
}

/// (config, channels) for every config among the fixtures, plus a few more filters and sizes.
fn configs() -> Vec<(String, PreprocessConfig)> {
    let mut configs = Vec::new();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(fixtures().join("configs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    for path in paths {
        for channels in [1, 3] {
            if let Ok(cfg) = PreprocessConfig::from_json_file_for_channels(&path, channels) {
                configs.push((format!("{}@{channels}", path.display()), cfg));
            }
        }
    }
    for resample in 0..6 {
        let json = format!(r#"{{"size": {{"height": 37, "width": 61}}, "resample": {resample}}}"#);
        configs.push((
            json.clone(),
            PreprocessConfig::from_json_str(&json).unwrap(),
        ));
    }
    configs
}

fn load(loader: &mut ImageLoader, path: &Path) -> Result<Vec<u8>, PreprocessError> {
    let mut out = vec![0; loader.output_bytes()];
    loader.load_file_into(path, &mut out).map(|_| out)
}

#[test]
fn a_reused_loader_gives_what_fresh_loaders_give() {
    let images = fixture_images();
    for (name, cfg) in configs() {
        let mut reused = ImageLoader::new(&cfg, ImageLimits::default());
        // Twice through, so each image follows images of other sizes and formats.
        for path in images.iter().chain(images.iter().rev()) {
            let fresh = load(&mut ImageLoader::new(&cfg, ImageLimits::default()), path);
            let again = load(&mut reused, path);
            match (fresh, again) {
                (Ok(a), Ok(b)) => assert!(a == b, "{name}: {}", path.display()),
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
                (a, b) => panic!("{name} {}: {a:?} against {b:?}", path.display()),
            }
        }
    }
}

#[test]
fn the_table_path_equals_preprocess_file_bit_for_bit() {
    for (name, cfg) in configs() {
        let mut loader = ImageLoader::new(&cfg, ImageLimits::default());
        let table = normalization_table(&cfg);
        assert_eq!(table.len(), cfg.num_channels() * 256);
        for path in fixture_images() {
            let Ok(expected) = preprocess_file(&path, &cfg) else {
                // do_resize false on a fixture of another size: both refuse it.
                assert!(
                    load(&mut loader, &path).is_err(),
                    "{name} {}",
                    path.display()
                );
                continue;
            };
            let hwc = load(&mut loader, &path).unwrap();
            let mut chw = vec![f32::NAN; hwc.len()];
            normalize_into(&hwc, cfg.num_channels(), &table, &mut chw);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert!(bits(&chw) == bits(&expected), "{name}: {}", path.display());
        }
    }
}

#[test]
fn an_output_buffer_of_the_wrong_length_is_an_error() {
    let cfg = PreprocessConfig::hf_default(32, 3);
    let mut loader = ImageLoader::new(&cfg, ImageLimits::default());
    assert_eq!(loader.output_bytes(), 32 * 32 * 3);
    let cat = fixtures().join("cat.jpg");
    let bytes = std::fs::read(&cat).unwrap();
    for len in [0, 32 * 32 * 3 - 1, 32 * 32 * 3 + 1, 32 * 32 * 4] {
        let mut out = vec![0; len];
        for result in [
            loader.load_file_into(&cat, &mut out),
            loader.load_bytes_into(&bytes, "cat", &mut out),
        ] {
            match result {
                Err(e @ PreprocessError::OutputSize { .. }) => {
                    assert!(e.to_string().contains("3072"), "{e}")
                }
                other => panic!("{len}: {other:?}"),
            }
        }
    }
    // The loader still works afterwards.
    let mut out = vec![0; loader.output_bytes()];
    let times = loader.load_file_into(&cat, &mut out).unwrap();
    assert!(times.decode > std::time::Duration::ZERO);
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A PNG whose header claims `width x height` pixels of `bit_depth`-bit `color_type`, with
/// one empty IDAT: enough for a decoder to read the header, far too little to decode.
fn png_header_only(width: u32, height: u32, bit_depth: u8, color_type: u8) -> Vec<u8> {
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut chunk = |kind: &[u8], data: &[u8]| {
        png.extend((data.len() as u32).to_be_bytes());
        let mut body = kind.to_vec();
        body.extend_from_slice(data);
        png.extend_from_slice(&body);
        png.extend(crc32(&body).to_be_bytes());
    };
    let mut ihdr = Vec::new();
    ihdr.extend(width.to_be_bytes());
    ihdr.extend(height.to_be_bytes());
    ihdr.extend([bit_depth, color_type, 0, 0, 0]);
    chunk(b"IHDR", &ihdr);
    chunk(b"IDAT", &[0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01]);
    chunk(b"IEND", &[]);
    png
}

#[test]
fn the_pixel_limit_is_checked_from_the_header() {
    // 10000 x 9000 8-bit RGB: 90 million pixels, just over PIL's MAX_IMAGE_PIXELS.
    let png = png_header_only(10_000, 9_000, 8, 2);
    let mut loader = ImageLoader::new(&PreprocessConfig::hf_default(32, 3), Default::default());
    let mut out = vec![0; loader.output_bytes()];
    match loader.load_bytes_into(&png, "big.png", &mut out) {
        Err(e @ PreprocessError::ImageTooLarge { .. }) => {
            let message = e.to_string();
            assert!(message.contains("10000x9000"), "{message}");
            assert!(
                message.contains(&PIL_MAX_IMAGE_PIXELS.to_string()),
                "{message}"
            );
            assert!(message.contains("--max-pixels"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    // A JPEG too, with a lower limit.
    let limits = ImageLimits {
        max_pixels: 1000,
        ..Default::default()
    };
    let mut loader = ImageLoader::new(&PreprocessConfig::hf_default(32, 3), limits);
    let error = loader
        .load_file_into(&fixtures().join("cat.jpg"), &mut out)
        .unwrap_err();
    assert!(
        matches!(
            error,
            PreprocessError::ImageTooLarge {
                max_pixels: 1000,
                ..
            }
        ),
        "{error:?}"
    );
}

#[test]
fn a_shortest_edge_resize_over_the_pixel_limit_is_refused_before_it_is_allocated() {
    // 1 x 2000: a shortest edge of 64 would make it 64 x 128000 (8.2 million pixels).
    let mut png = Vec::new();
    image::GrayImage::new(1, 2000)
        .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .unwrap();
    let cfg = PreprocessConfig::from_json_str(
        r#"{"size": {"shortest_edge": 64}, "do_center_crop": true, "crop_size": 64}"#,
    )
    .unwrap();
    let limits = ImageLimits {
        max_pixels: 1_000_000,
        ..Default::default()
    };
    let mut loader = ImageLoader::new(&cfg, limits);
    let mut out = vec![0; loader.output_bytes()];
    let error = loader
        .load_bytes_into(&png, "thin.png", &mut out)
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "image thin.png (1x2000) resized to a shortest edge of 64 would be 64x128000, more than \
         the limit of 1000000 pixels (--max-pixels raises it)"
    );
    // Under the limit it goes through.
    let mut loader = ImageLoader::new(&cfg, ImageLimits::default());
    loader.load_bytes_into(&png, "thin.png", &mut out).unwrap();
}

#[test]
fn a_sixteen_bit_rgba_png_under_the_pixel_cap_is_refused_by_its_decoded_bytes() {
    // 20000 x 8947 = 178.94 million pixels, just under PIL's cap of twice MAX_IMAGE_PIXELS,
    // which preprocess_bytes applies; at 8 bytes a pixel, 1.43 GB decoded, over 1 GiB.
    let (width, height) = (20_000u64, 8_947u64);
    assert!(width * height <= MAX_IMAGE_PIXELS);
    let png = png_header_only(width as u32, height as u32, 16, 6);
    let error = preprocess_bytes(&png, &PreprocessConfig::hf_default(32, 3)).unwrap_err();
    match &error {
        PreprocessError::DecodedTooLarge {
            bytes,
            max_decoded_bytes,
            ..
        } => {
            assert_eq!(*bytes, width * height * 8);
            assert_eq!(*max_decoded_bytes, 1 << 30);
        }
        other => panic!("{other:?}"),
    }
    assert!(error.to_string().contains("--max-decoded-bytes"), "{error}");
    // A JPEG decodes to 3 bytes a pixel.
    let limits = ImageLimits {
        max_decoded_bytes: 1000,
        ..Default::default()
    };
    let mut loader = ImageLoader::new(&PreprocessConfig::hf_default(32, 3), limits);
    let mut out = vec![0; loader.output_bytes()];
    let error = loader
        .load_file_into(&fixtures().join("cat.jpg"), &mut out)
        .unwrap_err();
    assert!(
        matches!(error, PreprocessError::DecodedTooLarge { .. }),
        "{error:?}"
    );
}

#[test]
fn a_file_over_the_size_limit_is_refused_without_reading_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = PreprocessConfig::hf_default(32, 3);
    let mut out = vec![0; 32 * 32 * 3];

    // A sparse 4 GiB file: refused by its size, at once.
    let huge = dir.path().join("huge.jpg");
    let file = std::fs::File::create(&huge).unwrap();
    file.set_len(4 << 30).unwrap();
    drop(file);
    let start = std::time::Instant::now();
    let mut loader = ImageLoader::new(&cfg, ImageLimits::default());
    let error = loader.load_file_into(&huge, &mut out).unwrap_err();
    assert!(start.elapsed().as_secs_f64() < 1.0);
    match &error {
        PreprocessError::FileTooLarge { max_file_bytes, .. } => {
            assert_eq!(*max_file_bytes, 512 << 20)
        }
        other => panic!("{other:?}"),
    }
    let message = error.to_string();
    assert!(message.contains("huge.jpg"), "{message}");
    assert!(message.contains("--max-file-size"), "{message}");
    let error = preprocess_file(&huge, &cfg).unwrap_err();
    assert!(
        matches!(error, PreprocessError::FileTooLarge { .. }),
        "{error:?}"
    );

    // A real image over a small limit.
    let small = ImageLimits {
        max_file_bytes: 100,
        ..Default::default()
    };
    let mut loader = ImageLoader::new(&cfg, small);
    let error = loader
        .load_file_into(&fixtures().join("cat.jpg"), &mut out)
        .unwrap_err();
    assert!(
        matches!(
            error,
            PreprocessError::FileTooLarge {
                max_file_bytes: 100,
                ..
            }
        ),
        "{error:?}"
    );

    // A device with no size to go by: refused without being read.
    let zero = Path::new("/dev/zero");
    if zero.exists() {
        let mut loader = ImageLoader::new(&cfg, ImageLimits::default());
        let start = std::time::Instant::now();
        let error = loader.load_file_into(zero, &mut out).unwrap_err();
        assert!(start.elapsed().as_secs_f64() < 1.0);
        let source = std::error::Error::source(&error).map(|e| e.to_string());
        assert_eq!(source.as_deref(), Some("a device, not a regular file"));
    }
}

#[test]
fn a_read_error_states_its_cause_once() {
    // Opening a folder works on Unix; reading it fails.
    let dir = tempfile::tempdir().unwrap();
    let cfg = PreprocessConfig::hf_default(32, 3);
    let error = preprocess_file(dir.path(), &cfg).unwrap_err();
    let PreprocessError::FileRead { source, .. } = &error else {
        // Other platforms may refuse to open it at all; nothing to check there.
        if cfg!(target_os = "linux") {
            panic!("{error:?}");
        }
        return;
    };
    let cause = source.to_string();
    assert!(!error.to_string().contains(&cause), "{error}");
    let chain = format!("{error}: {}", std::error::Error::source(&error).unwrap());
    assert_eq!(chain.matches(&cause).count(), 1, "{chain}");
}

#[test]
fn the_default_limits_are_pils() {
    let limits = ImageLimits::default();
    assert_eq!(limits.max_pixels, 89_478_485);
    assert_eq!(limits.max_decoded_bytes, 1 << 30);
    assert_eq!(limits.max_file_bytes, 512 << 20);
    fn send<T: Send>() {}
    send::<ImageLoader>();
}

#[test]
fn decoded_pixels_give_what_their_file_gives() {
    // PNGs without orientation or a transparent colour: the `image` crate's RGB or grey
    // pixels are what the loader decodes from the file.
    for (file, grey) in [
        ("coffee.png", false),
        ("astronaut_portrait.png", false),
        ("camera_gray.png", true),
    ] {
        let path = fixtures().join(file);
        let decoded = image::open(&path).unwrap();
        let (pixels, channels) = if grey {
            (decoded.to_luma8().into_raw(), 1)
        } else {
            (decoded.to_rgb8().into_raw(), 3)
        };
        let (width, height) = (decoded.width() as usize, decoded.height() as usize);
        let image_name = path.display().to_string();
        for (name, cfg) in configs() {
            let mut loader = ImageLoader::new(&cfg, ImageLimits::default());
            let from_file = load(&mut loader, &path);
            let mut from_pixels = vec![0; loader.output_bytes()];
            let result = loader.load_pixels_into(
                &pixels,
                (height, width),
                channels,
                &image_name,
                &mut from_pixels,
            );
            match (from_file, result) {
                (Ok(a), Ok(())) => assert!(a == from_pixels, "{name}: {file}"),
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{name}: {file}"),
                (a, b) => panic!("{name} {file}: {a:?} against {b:?}"),
            }
        }
    }
}

#[test]
fn decoded_pixels_of_a_wrong_layout_are_refused() {
    let cfg = PreprocessConfig::hf_default(8, 3);
    let mut loader = ImageLoader::new(&cfg, ImageLimits::default());
    let mut out = vec![0; loader.output_bytes()];
    let mut refuse = |pixels: &[u8], size, channels| {
        loader
            .load_pixels_into(pixels, size, channels, "test", &mut out)
            .unwrap_err()
            .to_string()
    };
    assert!(refuse(&[0; 16], (2, 2), 4).contains("4 channels"));
    assert!(refuse(&[0; 11], (2, 2), 3).contains("11 bytes"));
    assert!(refuse(&[], (0, 2), 3).contains("no pixels"));
}

#[test]
fn a_webp_missing_its_last_bytes_is_refused_as_pil_refuses_it() {
    let whole = std::fs::read(fixtures().join("astronaut.webp")).unwrap();
    let cfg = PreprocessConfig::hf_default(8, 3);
    assert!(preprocess_bytes(&whole, &cfg).is_ok());
    let accepted: Vec<usize> = [1, 2, 4, 16, 64]
        .into_iter()
        .filter(|&cut| preprocess_bytes(&whole[..whole.len() - cut], &cfg).is_ok())
        .collect();
    assert!(accepted.is_empty(), "accepted with {accepted:?} bytes cut");
    let error = preprocess_bytes(&whole[..whole.len() - 1], &cfg)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("truncated: its RIFF header says 5304 bytes, it holds 5303"),
        "{error}"
    );
}
