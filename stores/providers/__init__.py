"""The models the pipeline calls: the sentence encoder, the cross-encoder and the reformulation provider."""
