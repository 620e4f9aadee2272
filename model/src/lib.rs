//! ViT: config, preprocessing, graph builder, labels.
