//! The vector an image is embedded as (`vitrt embed --pool`, the Python module's
//! `Model.embed(pool=...)`), and which one a checkpoint gets when none is asked for.

use crate::model::{Output, VisionModel};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pool {
    /// CLIP's projected `pooler_output`, SigLIP's attention-pooling head (`image_embeds`).
    Projected,
    /// transformers' `pooler_output` (timm's pre-logits features).
    Pooler,
    /// Token 0 of `last_hidden_state`.
    Cls,
    /// The mean of the patch tokens of `last_hidden_state`.
    Mean,
}

/// A pool the checkpoint does not have: what was asked, and what it has, for the caller to
/// word in its own terms (`--pool` or `pool=`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolUnavailable {
    pub asked: Pool,
    /// The family's name (`ModelConfig::family`).
    pub family: &'static str,
    /// The pools the checkpoint has, in [`Pool::ALL`]'s order.
    pub available: Vec<Pool>,
}

impl Pool {
    /// Every pool, in the default's order of preference.
    pub const ALL: [Pool; 4] = [Pool::Projected, Pool::Pooler, Pool::Cls, Pool::Mean];

    /// Its name: `projected`, `pooler`, `cls` or `mean`.
    pub fn name(self) -> &'static str {
        match self {
            Pool::Projected => "projected",
            Pool::Pooler => "pooler",
            Pool::Cls => "cls",
            Pool::Mean => "mean",
        }
    }

    /// The pool of that name.
    pub fn parse(name: &str) -> Option<Pool> {
        Pool::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The graph output that holds it.
    pub fn output(self) -> Output {
        match self {
            Pool::Projected => Output::ImageEmbeds,
            Pool::Pooler => Output::PoolerOutput,
            Pool::Cls => Output::ClassToken,
            Pool::Mean => Output::PatchMean,
        }
    }

    /// The pools `model` has, in [`Pool::ALL`]'s order.
    pub fn available(model: &VisionModel) -> Vec<Pool> {
        let outputs = model.available_outputs();
        Pool::ALL
            .into_iter()
            .filter(|p| outputs.contains(p.output()))
            .collect()
    }

    /// `asked` if `model` has it; without one, the first of [`Pool::ALL`] it has (every
    /// vision model has `mean`). An error names what it has instead.
    pub fn choose(asked: Option<Pool>, model: &VisionModel) -> Result<Pool, PoolUnavailable> {
        let available = Pool::available(model);
        match asked {
            Some(pool) if available.contains(&pool) => Ok(pool),
            None if !available.is_empty() => Ok(available[0]),
            _ => Err(PoolUnavailable {
                asked: asked.unwrap_or(Pool::Mean),
                family: model.config.family.name(),
                available,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back() {
        for pool in Pool::ALL {
            assert_eq!(Pool::parse(pool.name()), Some(pool));
        }
        assert_eq!(Pool::parse("CLS"), None);
        assert_eq!(Pool::parse(""), None);
    }
}
