"""The objectives tests train the networks ``famlab pretrain`` builds."""

import pytest
from famlab.experiments.configuration.compose import compose


@pytest.mark.parametrize("family", ["bert", "gpt", "t5"])
def test_tiny_net_has_the_composed_block_choices(family, tiny_net):
    """The fixture's tiny network has the family preset's block choices (dropout aside: the fixture turns it off)."""
    net, composed = tiny_net(family), compose([family], []).cfg.model
    keys = ("pos", "norm", "norm_position", "ffn", "activation", "bias", "tie_embeddings", "qk_scale", "head_scale",
            "type_vocab_size", "norm_eps", "init", "init_std", "rel_pos_buckets", "rel_pos_max_distance")
    for key in keys:
        ours, want = getattr(net.config, key), getattr(composed, key)
        if key == "head_scale" and family == "t5":  # derived from the width: dim^-0.5 for a tied T5 head
            ours, want = ours * net.config.dim**0.5, want * composed.dim**0.5
        assert getattr(ours, "value", ours) == pytest.approx(getattr(want, "value", want)), key
