qwen2_chat_template = "fake qwen2 chat template"
