//! PIL's resampling filters and what a resize is asked for: the vocabulary that the configs
//! (each processor class's defaults, preprocessor_config.json, timm's pretrained_cfg) and the
//! resize share.

/// PIL's resampling filters, by the ids that `resample` uses in preprocessor_config.json.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resample {
    Nearest,
    Lanczos,
    Bilinear,
    Bicubic,
    Box,
    Hamming,
}

impl Resample {
    pub fn from_pil_id(id: i64) -> Result<Self, String> {
        match id {
            0 => Ok(Self::Nearest),
            1 => Ok(Self::Lanczos),
            2 => Ok(Self::Bilinear),
            3 => Ok(Self::Bicubic),
            4 => Ok(Self::Box),
            5 => Ok(Self::Hamming),
            6 | 7 => Err(format!(
                "resample {id} is Pillow's MKS{} filter, which vitrt does not implement",
                if id == 6 { 2013 } else { 2021 }
            )),
            _ => Err(format!(
                "unknown resample filter {id}: PIL's are 0 nearest, 1 lanczos, 2 bilinear, \
                 3 bicubic, 4 box, 5 hamming"
            )),
        }
    }

    pub fn pil_id(self) -> u8 {
        match self {
            Self::Nearest => 0,
            Self::Lanczos => 1,
            Self::Bilinear => 2,
            Self::Bicubic => 3,
            Self::Box => 4,
            Self::Hamming => 5,
        }
    }

    /// Half-width of the filter at scale 1, in input pixels.
    pub(super) fn support(self) -> f64 {
        match self {
            Self::Nearest | Self::Box => 0.5,
            Self::Bilinear | Self::Hamming => 1.0,
            Self::Bicubic => 2.0,
            Self::Lanczos => 3.0,
        }
    }

    /// The filter's weight at distance `x` (in filter units) from the sample centre. The
    /// formulas, including which end of an interval is open, are PIL's: the fixed-point
    /// rounding that follows makes the results sensitive to them.
    pub(super) fn weight(self, x: f64) -> f64 {
        use std::f64::consts::PI;
        let sinc = |x: f64| {
            if x == 0.0 {
                1.0
            } else {
                (PI * x).sin() / (PI * x)
            }
        };
        match self {
            Self::Nearest | Self::Box => {
                if x > -0.5 && x <= 0.5 {
                    1.0
                } else {
                    0.0
                }
            }
            Self::Bilinear => {
                let x = x.abs();
                if x < 1.0 {
                    1.0 - x
                } else {
                    0.0
                }
            }
            Self::Hamming => {
                let x = x.abs();
                if x == 0.0 {
                    1.0
                } else if x >= 1.0 {
                    0.0
                } else {
                    let px = x * PI;
                    px.sin() / px * (0.54 + 0.46 * px.cos())
                }
            }
            Self::Bicubic => {
                // Keys' cubic with a = -0.5, as PIL uses.
                let a = -0.5;
                let x = x.abs();
                if x < 1.0 {
                    ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
                } else if x < 2.0 {
                    (((x - 5.0) * x + 8.0) * x - 4.0) * a
                } else {
                    0.0
                }
            }
            Self::Lanczos => {
                if (-3.0..3.0).contains(&x) {
                    sinc(x) * sinc(x / 3.0)
                } else {
                    0.0
                }
            }
        }
    }
}

/// What `size` asks the resize for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResizeTarget {
    /// Exactly height x width, whatever the image's aspect ratio.
    Fixed { height: usize, width: usize },
    /// The shorter side becomes this many pixels and the longer one keeps the aspect ratio,
    /// truncated as HF's `get_resize_output_image_size` does.
    ShortestEdge(usize),
}

impl ResizeTarget {
    /// (height, width) an image of `height x width` is resized to. For the shortest edge this
    /// is HF's arithmetic: `int(edge * long / short)` in floating point (exact here, as every
    /// product stays far below 2^53).
    pub fn resized_size(self, height: usize, width: usize) -> (usize, usize) {
        match self {
            Self::Fixed { height, width } => (height, width),
            Self::ShortestEdge(edge) => {
                let (short, long) = if width <= height {
                    (width, height)
                } else {
                    (height, width)
                };
                let new_long = (edge as f64 * long as f64 / short as f64) as usize;
                if width <= height {
                    (new_long, edge)
                } else {
                    (edge, new_long)
                }
            }
        }
    }
}
