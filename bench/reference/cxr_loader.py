"""The PyTorch baseline of `voxscale bench data` on chest films: what a CXR training script's loader does, timed over
the same manifest with as many workers.

  Dataset.__getitem__: the JPEG decoded (PIL: Image.open(...).convert("L"), or --decoder torchvision:
  torchvision.io.decode_jpeg, grey), resized keeping its aspect to fit SIZE x SIZE (torchvision.transforms.Resize:
  bilinear with antialiasing, the shorter output side computed as voxscale's data.resize fit does), padded to SIZE x
  SIZE centred with the image's minimum, then per-image z-score (voxscale's data.normalize zscore); a float tensor.
  DataLoader(batch_size, num_workers=WORKERS, persistent_workers): one untimed pass, then EPOCHS timed passes.

  .venv-bench/bin/python bench/reference/cxr_loader.py films.csv --size 320 --batch 16 --workers 2 [--epochs 2]

Prints one JSON line: {"framework", "decoder", "images", "images_per_s", "ms_per_image_per_worker", ...}.
"""
import argparse
import csv
import json
import os
import time

import torch


class Films(torch.utils.data.Dataset):
    def __init__(self, manifest, size, decoder):
        folder = os.path.dirname(os.path.abspath(manifest))
        with open(manifest) as f:
            self.paths = [os.path.join(folder, r["Path"]) for r in csv.DictReader(f)]
        self.size, self.decoder = size, decoder

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        import torchvision.transforms.functional as TF
        if self.decoder == "torchvision":
            from torchvision.io import ImageReadMode, decode_jpeg, read_file
            img = decode_jpeg(read_file(self.paths[i]), mode=ImageReadMode.GRAY)  # [1][h][w] uint8
        else:
            from PIL import Image
            img = TF.pil_to_tensor(Image.open(self.paths[i]).convert("L"))
        h, w = img.shape[-2:]
        s = self.size
        oh, ow = (s, round(w * s / h)) if s / h <= s / w else (round(h * s / w), s)
        img = TF.resize(img.float(), [oh, ow], interpolation=TF.InterpolationMode.BILINEAR, antialias=True)
        top, left = (s - oh) // 2, (s - ow) // 2
        img = TF.pad(img, [left, top, s - ow - left, s - oh - top], fill=float(img.min()))
        return (img - img.mean()) / img.std()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("manifest")
    ap.add_argument("--size", type=int, default=320)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--decoder", choices=["pil", "torchvision"], default="pil")
    a = ap.parse_args()
    torch.set_num_threads(1)  # each worker one image at a time, as voxscale's loader threads
    ds = Films(a.manifest, a.size, a.decoder)
    dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, num_workers=a.workers, persistent_workers=a.workers > 0,
                                     shuffle=False)
    for _ in dl:  # the warm-up pass: the page cache, the workers started
        pass
    t0 = time.perf_counter()
    for _ in range(a.epochs):
        for _ in dl:
            pass
    secs = time.perf_counter() - t0
    import torchvision
    rate = len(ds) * a.epochs / secs
    print(json.dumps({"framework": "pytorch %s / torchvision %s" % (torch.__version__, torchvision.__version__),
                      "decoder": a.decoder, "images": len(ds), "epochs": a.epochs, "workers": a.workers,
                      "batch": a.batch, "size": a.size, "seconds": secs, "images_per_s": rate,
                      "ms_per_image_per_worker": 1e3 * max(a.workers, 1) / rate}))


if __name__ == "__main__":
    main()
