"""A MiniWin-style decoder at the tiny scale: periodic RoPE in sliding-window layers, NoPE global.

MiniWin (Huo, "Periodic RoPE for Infinite Context LLMs", arXiv 2605.27980; released code
github.com/Cominder/miniwin, model/model_miniwin.py) repeats the layer pattern "SSSL": sliding-
window attention layers whose RoPE rotates by position mod W (W the window), then a global
attention layer without positional encoding, the last layer always global. The rotary layers
then never see a rotation outside 0..W-1, however long the sequence, and the global NoPE layers
see no position at all. Here, on configs/alibi_tiny.py's data and budget:

  * 4 layers: layers 0-2 sliding window of `WINDOW` = 64 tokens with RoPE at position mod 64
    (`model.position.rope_position_period`), layer 3 global NoPE (`nope_every` = `global_every`
    = 4): the released pattern "SSSL" with its last layer global;
  * rope_theta 1e6, the released default.

What this preset leaves out of the release: its window (64) and pattern are kept, its size (8
layers, 8 heads, 2 KV heads) is not (the tiny model's 4 layers and 4 heads); the release's
optional ALiBi window layers and its optional log-length logit scale in the NoPE layers (off by
default there) are not set. The paper body was not read, only its abstract and the code.
Compare with configs/swan_gpt_tiny.py (the same layout with plain RoPE positions).

  python train.py --config=configs/miniwin_tiny.py --workdir=workdirs/miniwin_tiny
"""

from configs import alibi_tiny

WINDOW = 64  # tokens seen by the sliding-window layers, and the period of their RoPE positions
GLOBAL_EVERY = 4  # layer 3 of 4: global attention, no positional encoding ("SSSL")


def get_config():
  """The tiny decoder with MiniWin's layout: 3 sliding-window layers with RoPE at position mod
  64, 1 global NoPE layer."""
  c = alibi_tiny.get_config()
  c.model.position.kind = "rope"
  c.model.position.rope_theta = 1e6
  c.model.position.nope_every = GLOBAL_EVERY
  c.model.position.rope_position_period = WINDOW
  c.model.sliding_window = WINDOW
  c.model.global_every = GLOBAL_EVERY
  return c
