#!/usr/bin/env bash
# tests/fuzz/make_seeds.sh: writes the seed corpus of the fuzz targets into tests/fuzz/corpus/<target>/ (committed;
# rerun after a file format changes). Seeds are real files voxscale reads, plus the inputs that once failed (the
# hardening issue's reproductions). Needs build/voxscale.
set -euo pipefail
cd "$(dirname "$0")/../.."
C=tests/fuzz/corpus
rm -rf "$C" && mkdir -p "$C"/{config,checkpoint,cli,tfrecord,manifest,volume,safetensors}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# config: the shipped configs and the texts that were once accepted by mistake
for f in configs/*.json configs/test/*.json tests/fuzz/ckpt_model.json; do cp "$f" "$C/config/$(basename "$f")"; done
printf '%s' '{"train": {"steps": 3}} // c' > "$C/config/trailing_text.json"
printf '%s' '{"train": {"steps": 3, "steps": 4}}' > "$C/config/duplicate_key.json"
printf '%s' '{"train": {"beta2": 0.999999999, "threads": 4096}}' > "$C/config/beta2_rounds_to_one.json"
printf '%s' '{"train": {"val_samples": 1000000}, "output": {"profile": "3:2"}}' > "$C/config/ranges.json"
printf '{"train": {"st\x1b[31meps": 1}}' > "$C/config/escape_in_key.json"
printf '%s' '{"train": {"global_batch": 8, "lr_scaling": "linear", "grad_accum": 2}, "dist": {"gpus": "all", "timeout_s": 5, "bucket_mb": 0.5, "first_bucket_mb": 0.1}}' > "$C/config/dist.json"

# checkpoint: a real checkpoint of the fuzz model (first byte: 1 = the target recomputes the CRC), and the
# header fields that were once trusted
./build/voxscale train --config tests/fuzz/ckpt_model.json --steps 2 --out "$tmp/ck" > /dev/null
ck="$tmp/ck/checkpoints/step_2.ckpt"
{ printf '\x00'; cat "$ck"; } > "$C/checkpoint/valid_crc_kept"
python3 - "$ck" "$C/checkpoint" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
H = struct.Struct("<8sIIQQqqqqd")
names = ("magic", "version", "header_bytes", "param_count", "fingerprint", "step", "next_sample", "seed", "world", "ema")
for name, value in [("next_sample", -7), ("step", -5), ("step", 2 ** 62), ("header_bytes", 64), ("world", 0),
                    ("ema", float("nan")), ("next_sample", 2 ** 62)]:
    h = dict(zip(names, H.unpack_from(data)))
    h[name] = value
    out = b"\x01" + H.pack(*(h[n] for n in names)) + data[H.size:]
    open("%s/%s_%s" % (sys.argv[2], name, str(value).replace("-", "minus")), "wb").write(out)
open("%s/valid_crc_fixed" % sys.argv[2], "wb").write(b"\x01" + data)
PY

# cli: train's arguments, NUL-separated
i=0
while IFS= read -r line; do
    i=$((i + 1)); printf '%s' "$line" | tr '|' '\0' > "$C/cli/args_$i"
done <<'ARGS'
--config|configs/test/tiny.json|--steps|20
--steps|5abc
--steps|0x10
--set|train.lr=1e-3|--set|model.channels=[8,16]|--lr|2e-3
--batch-size|0|--device|cpu|--threads|1|--seed|9
--profile|3:5|--deterministic|--out|runs/x
--set|novalue
--resume
--help
--gpus|2|--device|cpu|--lr-scaling|linear
ARGS

# tfrecord: a real event file (scalars, text, hparams, an image) and its damaged forms
./build/voxscale train --config configs/test/tiny.json --steps 2 --out "$tmp/tb" --set output.hist_every=0 > /dev/null
ev=$(ls "$tmp"/tb/events.out.tfevents.* | head -1)
cp "$ev" "$C/tfrecord/events"
head -c $(( $(stat -c %s "$ev") - 7 )) "$ev" > "$C/tfrecord/events_truncated"
python3 - "$ev" "$C/tfrecord/events_flipped" <<'PY'
import sys
d = bytearray(open(sys.argv[1], "rb").read()); d[len(d) // 2] ^= 0x40; open(sys.argv[2], "wb").write(d)
PY
printf '' > "$C/tfrecord/empty"

# manifest: CSV texts as users write them, and the malformed ones
printf 'path,split,label\nvols/a.nii.gz,train,0\nvols/b.nii.gz,val,1\n' > "$C/manifest/plain.csv"
printf 'path,split\r\n"vols/with,comma.nii",train\r\n"a ""quoted"" name.nii",val\r\n' > "$C/manifest/quoted_crlf.csv"
printf 'id,path\n1,/abs/x.nii\n2,rel/y.nii\n\n3,z.nii' > "$C/manifest/no_split.csv"
printf 'path,split\nx.nii,test\n,train\n"unterminated,train\n' > "$C/manifest/bad_rows.csv"

# manifest, issue 24: a BOM, a row longer than the old 16383-byte buffer, more than 256 columns, a NUL byte, UTF-16,
# a read column given twice, repeated rows and a file in both splits, no validation row, quotes holding line ends
printf '\xef\xbb\xbfpath,split\nvols/a.nii,train\nvols/b.nii,val\n' > "$C/manifest/bom.csv"
{ printf 'notes,path,split\n"'; head -c 20000 /dev/zero | tr '\0' x; printf '",vols/a.nii,train\nshort,vols/b.nii,val\n'; } > "$C/manifest/long_row.csv"
{ printf 'path,split\nvols/a.nii,train'; for i in $(seq 300); do printf ',%d' "$i"; done; printf '\n'; } > "$C/manifest/wide_row.csv"
printf 'path,split\nvols/a.nii\0junk,train\n' > "$C/manifest/nul.csv"
printf 'path,split\nvols/a.nii,train\n' | iconv -f utf-8 -t utf-16 > "$C/manifest/utf16.csv"
printf 'path,split,path\nvols/a.nii,train,x\n' > "$C/manifest/path_twice.csv"
printf 'path,split,label,label\nvols/a.nii,train,0,0\n./vols//a.nii,train,0,0\nvols/a.nii,val,0,0\nvols/b.nii,val,1,1\n' > "$C/manifest/dup_leak.csv"
printf 'path,split\nvols/a.nii,train\nvols/b.nii,train\n' > "$C/manifest/no_val.csv"
printf 'path,split\n"vols/multi\nline.nii",train\n"vols/b.nii",val\n' > "$C/manifest/quoted_newline.csv"
# manifest, issue 34: a head's label columns (fuzz_manifest.c reads each task's): classes, survival (one set all
# censored), a value beyond float32, multilabel targets
printf 'path,split,label,time,event,y,a,b\nv/a.nii,train,0,10,1,0.5,0,1\nv/b.nii,train,2,20,0,1e39,1,0\nv/c.nii,val,1,5,0,3,1,1\n' \
    > "$C/manifest/labels.csv"
printf 'path,split,label,time,event\nv/a.nii,train,1,10,0\nv/b.nii,val,1,1e39,0\nv/c.nii,val,1,7,0\n' \
    > "$C/manifest/labels_censored_one_class.csv"

# volume: small NIfTI files (first byte even) and PNG slice stacks (odd), written by nibabel and by hand
/usr/bin/python3 - "$C/volume" <<'PY'
import gzip, io, struct, sys, zlib
import numpy as np, nibabel as nib
out = sys.argv[1]
img = nib.Nifti1Image(np.arange(4 * 3 * 5, dtype=np.int16).reshape(4, 3, 5), np.eye(4))
img.header.set_slope_inter(0.5, 2.0)
raw = img.to_bytes()
open(out + "/nifti_int16", "wb").write(b"\0" + raw)
open(out + "/nifti_gz", "wb").write(b"\0" + gzip.compress(raw))
open(out + "/nifti_truncated", "wb").write(b"\0" + raw[:400])
two = nib.Nifti2Image(np.ones((2, 2, 2), np.float32), np.eye(4)).to_bytes()
open(out + "/nifti2", "wb").write(b"\0" + two)
def png(a, depth):
    rows = b"".join(b"\0" + a[y].astype(">u2" if depth == 16 else "u1").tobytes() for y in range(a.shape[0]))
    ch = lambda k, d: struct.pack(">I", len(d)) + k + d + struct.pack(">I", zlib.crc32(k + d) & 0xFFFFFFFF)
    return b"\x89PNG\r\n\x1a\n" + ch(b"IHDR", struct.pack(">IIBBBBB", a.shape[1], a.shape[0], depth, 0, 0, 0, 0)) + \
        ch(b"IDAT", zlib.compress(rows)) + ch(b"IEND", b"")
a = np.arange(12, dtype=np.uint16).reshape(3, 4) * 1000
open(out + "/png16_two_slices", "wb").write(b"\1" + png(a, 16) + b"SLICE" + png(a, 16))
open(out + "/png8_mismatched", "wb").write(b"\1" + png((a // 256).astype(np.uint8), 8) + b"SLICE" + png(a[:2], 16))
# issue 24: first byte 0 names by content, 2 .nii, 4 .nii.gz, 6 a .hdr/.img pair cut at "IMG!"
open(out + "/png_mixed_depth", "wb").write(b"\1" + png((a // 256).astype(np.uint8), 8) + b"SLICE" + png(a, 16))
bad_crc = bytearray(png(a, 16))
at = bad_crc.index(b"IDAT")
bad_crc[at + 4 + struct.unpack(">I", bad_crc[at - 4:at])[0]] ^= 0xFF
open(out + "/png_idat_crc", "wb").write(b"\1" + png(a, 16) + b"SLICE" + bytes(bad_crc))
huge = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + struct.pack(">IIBBBBB", 2 ** 31 - 1, 3, 8, 0, 0, 0, 0)
open(out + "/png_huge_ihdr", "wb").write(b"\1" + huge + struct.pack(">I", zlib.crc32(huge[12:]) & 0xFFFFFFFF))
for off in (0.0, 10.0, 352.5):
    r = bytearray(raw)
    struct.pack_into("<f", r, 108, off)
    open(out + "/nifti_vox_offset_%g" % off, "wb").write(b"\0" + bytes(r))
    open(out + "/nifti_gz_vox_offset_%g" % off, "wb").write(b"\0" + gzip.compress(bytes(r)))
for code in (32, 1536, 1792):  # complex64, float128, complex128
    r = bytearray(raw)
    struct.pack_into("<h", r, 70, code)
    open(out + "/nifti_datatype_%d" % code, "wb").write(b"\0" + bytes(r))
r = bytearray(raw)
struct.pack_into("<8h", r, 40, 4, 5, 3, 4, -2, 1, 1, 1)  # dim[4] bad
open(out + "/nifti_dim4", "wb").write(b"\0" + bytes(r))
f32 = np.ones((4, 3, 5), np.float32)
f32[1, 1, 1], f32[2, 2, 2] = np.nan, np.inf
open(out + "/nifti_nonfinite", "wb").write(b"\0" + nib.Nifti1Image(f32, np.eye(4)).to_bytes())
f64 = np.ones((4, 3, 5), np.float64)
f64[0, 0, 0] = 1e300
open(out + "/nifti_float64_1e300", "wb").write(b"\0" + nib.Nifti1Image(f64, np.eye(4)).to_bytes())
big = nib.Nifti1Image(np.full((4, 3, 5), 100, np.int16), np.eye(4))
big.header.set_slope_inter(1e38, 0)
open(out + "/nifti_slope_1e38", "wb").write(b"\0" + big.to_bytes())
open(out + "/nifti_gz_multi_member", "wb").write(b"\0" + gzip.compress(raw[:200]) + gzip.compress(raw[200:]))
open(out + "/nifti_gzip_named_nii", "wb").write(b"\2" + gzip.compress(raw))
open(out + "/nifti_plain_named_gz", "wb").write(b"\4" + raw)
gz = bytearray(gzip.compress(raw))
gz[-8] ^= 1  # the trailer's CRC
open(out + "/nifti_gz_bad_crc", "wb").write(b"\0" + bytes(gz))
pair = nib.Nifti1Pair(np.arange(60, dtype=np.int16).reshape(4, 3, 5), np.eye(4))
hdr, img = pair.header.binaryblock, np.arange(60, dtype=np.int16).reshape(4, 3, 5).tobytes(order="F")
open(out + "/pair", "wb").write(b"\6" + hdr + b"IMG!" + img)
open(out + "/pair_img_missing", "wb").write(b"\6" + hdr)
PY
# volume: single 2-D images (first byte 3: a .jpg, 7: a .png): JPEGs cjpeg writes (baseline, progressive, colour,
# restart markers), one cut short, one whose frame header claims 12-bit samples, and a grey PNG
/usr/bin/python3 - "$C/volume" <<'PY'
import struct, subprocess, sys, zlib
out = sys.argv[1]
w, h = 24, 17
grey = bytes((x * 9 + y * 5) % 256 for y in range(h) for x in range(w))
rgb = bytes(v for p in grey for v in (p, 255 - p, p // 2))
def cjpeg(pnm, *flags):
    return subprocess.run(["cjpeg", *flags], input=pnm, stdout=subprocess.PIPE, check=True).stdout
pgm, ppm = b"P5 %d %d 255\n" % (w, h) + grey, b"P6 %d %d 255\n" % (w, h) + rgb
base = cjpeg(pgm)
open(out + "/jpeg_grey", "wb").write(b"\3" + base)
open(out + "/jpeg_progressive_rgb", "wb").write(b"\3" + cjpeg(ppm, "-progressive"))
open(out + "/jpeg_restarts", "wb").write(b"\3" + cjpeg(ppm, "-restart", "1", "-sample", "1x1"))
open(out + "/jpeg_truncated", "wb").write(b"\3" + base[:len(base) // 2])
sof = base.index(b"\xff\xc0")
open(out + "/jpeg_12bit", "wb").write(b"\3" + base[:sof + 4] + bytes([12]) + base[sof + 5:])
rows = b"".join(b"\0" + grey[y * w:(y + 1) * w] for y in range(h))
ch = lambda k, d: struct.pack(">I", len(d)) + k + d + struct.pack(">I", zlib.crc32(k + d) & 0xFFFFFFFF)
png = b"\x89PNG\r\n\x1a\n" + ch(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)) + ch(b"IDAT", zlib.compress(rows)) + \
    ch(b"IEND", b"")
open(out + "/png_image", "wb").write(b"\7" + png)
PY
# safetensors (issue 28): files the reference writer makes (every float dtype, an int64 scalar, metadata, an empty
# tensor) and the damaged forms the reader must refuse: header length, JSON, dtype, shape, overlap, out of the file
.venv/bin/python - "$C/safetensors" <<'PY'
import json, struct, sys
import torch
from safetensors.torch import save
out = sys.argv[1]
good = save({"conv1.weight": torch.arange(24, dtype=torch.float32).reshape(2, 1, 3, 2, 2), "bn1.running_var":
             torch.ones(2, dtype=torch.float64), "h": torch.tensor([1.0, -2.0], dtype=torch.float16), "b":
             torch.tensor([3.0], dtype=torch.bfloat16), "bn1.num_batches_tracked": torch.tensor(7), "e": torch.zeros(0)},
            metadata={"format": "pt", "voxscale.family": "resnet3d"})
open(out + "/valid", "wb").write(good)
def raw(header, data=b""):
    h = header.encode() if isinstance(header, str) else header
    return struct.pack("<Q", len(h)) + h + data
t = lambda dt, shape, off: {"dtype": dt, "shape": shape, "data_offsets": off}
cases = {"bad_length": struct.pack("<Q", 1 << 40) + good[8:], "bad_json": raw('{"a": {"dtype": "F32",'),
         "bad_dtype": raw(json.dumps({"a": t("F33", [1], [0, 4])}), b"\0" * 4),
         "bad_shape": raw(json.dumps({"a": t("F32", [3], [0, 4])}), b"\0" * 4),
         "overlap": raw(json.dumps({"a": t("F32", [2], [0, 8]), "b": t("F32", [2], [4, 12])}), b"\0" * 12),
         "out_of_file": raw(json.dumps({"a": t("F32", [4], [0, 16])}), b"\0" * 8),
         "trailing": raw(json.dumps({"a": t("F32", [1], [0, 4])}) + " x", b"\0" * 4),
         "twice": raw('{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, '
                      '"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}', b"\0" * 8)}
for name, data in cases.items():
    open(out + "/" + name, "wb").write(data)
# issue 34: the metadata's config, which predict --weights parses (fuzz_safetensors.c): a real one and a bad one
w = {"conv1.weight": torch.ones(2, 1, 1, 1, 1)}
open(out + "/with_config", "wb").write(save(w, metadata={"format": "pt", "voxscale.config":
                                                          open("configs/test/resnet-tiny.json").read()}))
open(out + "/with_bad_config", "wb").write(save(w, metadata={"voxscale.config": '{"train": {"steps": 3, "steps": 4}}'}))
PY
echo "seeds: $(find "$C" -type f | wc -l) files, $(du -sh "$C" | cut -f1)"
