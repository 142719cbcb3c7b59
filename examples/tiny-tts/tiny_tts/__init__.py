"""tiny-tts: a small streaming text-to-speech pipeline (the rsi-bot demo target)."""
