"""The models a campaign serves: the named shapes (`shapes`, plain data the campaign file's fields are checked
against), and the writers that generate a random-weight model of a shape in each format an engine serves
(`hf_model`, `hf_quantized`, `gguf_model`), cached by key (`artifact`)."""
