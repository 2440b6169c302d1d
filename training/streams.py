"""The names ``data.train`` gives to SFT's endless training streams (fresh examples every step, no epochs)."""

STREAMS = ("synthetic", "distorted-photos")  # procedural interior scenes; real photos with fresh distortions
