"""MONAI's DenseNet121/169/201 as the PyTorch baseline of voxscale's densenet family (bench/side_by_side.sh looks a
family's reference up by name): the same script as resnet3d.py, whose build_model builds monai.networks.nets.DenseNet
for model.family densenet.

  python bench/reference/densenet.py --config configs/cxr-densenet121.json --bench [--batch-size 4] [--steps 10]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from resnet3d import main  # noqa: E402

if __name__ == "__main__":
    main()
