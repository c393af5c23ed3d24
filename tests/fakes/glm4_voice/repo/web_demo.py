"""Fake of THUDM/GLM-4-Voice web_demo.py: only the prompt assignments the worker reads matter."""

if __name__ == "__main__":

    def inference_fn(input_mode):
        if input_mode == "audio":
            system_prompt = "FAKE audio prompt: User will provide you with a speech instruction. (fake)"
        else:
            system_prompt = "FAKE text prompt: User will provide you with a text instruction. (fake)"
        return system_prompt
