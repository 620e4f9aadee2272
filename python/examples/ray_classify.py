"""Classify many images with Ray Data and vitrt, one model per actor.

Ray Data reads the files (a local folder, or object storage on a cluster), and a pool of
actors classifies them batch by batch: each actor loads one `vitrt.Model` when it starts (on
its own GPU with `--gpus-per-actor 1`, else on the CPU), and vitrt decodes the files' bytes
in Rust exactly as `vitrt classify` decodes files. Each image gets its top label and its
probability; a file that is not a readable image gets its error instead, and the rest of its
batch is still classified.

    pip install ./python "ray[data]"
    python python/examples/ray_classify.py --model examples/digits-vit examples/digits

On a cluster, give the folder as a URI Ray Data reads (s3://..., gs://...), the model as a
hub id or a folder every node has, --actors as the number of GPUs and --gpus-per-actor 1.
--output writes the results as Parquet. On a machine with few cores, give the actors less than
a CPU each (--cpus-per-actor 0.5): Ray Data's read tasks need one too, and with every CPU held
by an actor the pipeline waits forever.
"""

import argparse
import math

import ray

import vitrt


class Classifier:
    """One actor's model, loaded once, called on each batch of file contents."""

    def __init__(self, model, device, dtype, top_k):
        # Ray Data calls the actor from another thread than the one that built it: CUDA
        # graphs would stay on the building thread.
        self.model = vitrt.Model(model, device=device, dtype=dtype, cuda_graphs=False)
        self.top_k = top_k

    def __call__(self, batch):
        files = batch["bytes"]
        try:
            predictions = self.model.classify(files, top_k=self.top_k)
            errors = [""] * len(predictions)
        except ValueError:
            # A file that is not a readable image fails the whole call (its error names it):
            # classify the batch one file at a time to keep the others.
            predictions, errors = [], []
            for contents in files:
                try:
                    predictions += self.model.classify([contents], top_k=self.top_k)
                    errors.append("")
                except ValueError as error:
                    predictions.append([])
                    errors.append(str(error))
        return {
            "path": batch["path"],
            "label": [p[0]["label"] if p else "" for p in predictions],
            "probability": [p[0]["probability"] if p else math.nan for p in predictions],
            "top_k": [", ".join(f"{q['label']}:{q['probability']:.4f}" for q in p) for p in predictions],
            "error": errors,
        }


def classify_files(images, model, *, device=None, dtype=None, top_k=3, actors=1,
                   gpus_per_actor=0, cpus_per_actor=1, batch_size=64):
    """The Ray Dataset of every file under `images` with its top labels (or its error)."""
    files = ray.data.read_binary_files(images, include_paths=True)
    return files.map_batches(
        Classifier,
        fn_constructor_kwargs={"model": model, "device": device, "dtype": dtype, "top_k": top_k},
        batch_size=batch_size,
        batch_format="numpy",
        concurrency=actors,
        num_gpus=gpus_per_actor,
        num_cpus=cpus_per_actor,
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("images", help="a folder or file pattern Ray Data reads (local or a URI)")
    parser.add_argument("--model", required=True, help="a model folder or a hub id")
    parser.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: vitrt's)")
    parser.add_argument("--dtype", default=None, help="f32, f16 or bf16 (default: vitrt's)")
    parser.add_argument("--top-k", type=int, default=3)
    parser.add_argument("--actors", type=int, default=1, help="models running at once")
    parser.add_argument("--gpus-per-actor", type=float, default=0)
    parser.add_argument("--cpus-per-actor", type=float, default=1)
    parser.add_argument("--batch-size", type=int, default=64, help="images per call")
    parser.add_argument("--output", default=None, help="a folder to write Parquet files into")
    args = parser.parse_args()

    ray.init()
    results = classify_files(
        args.images,
        args.model,
        device=args.device,
        dtype=args.dtype,
        top_k=args.top_k,
        actors=args.actors,
        gpus_per_actor=args.gpus_per_actor,
        cpus_per_actor=args.cpus_per_actor,
        batch_size=args.batch_size,
    )
    if args.output:
        results.write_parquet(args.output)
        print(f"wrote {args.output}")
        return
    for row in results.sort("path").iter_rows():
        if row["error"]:
            print(f"{row['path']}: {row['error']}")
        else:
            print(f"{row['path']}: {row['label']} ({row['probability']:.4f}); top {args.top_k}: {row['top_k']}")


if __name__ == "__main__":
    main()
