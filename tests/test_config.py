import pytest

from tsformer.config import (
    Config,
    ModelConfig,
    apply_overrides,
    config_from_dict,
    load_config,
    save_config,
    to_dict,
)
from tsformer.errors import ConfigError


def test_yaml_round_trip(tmp_path):
    cfg = apply_overrides(Config(), ["model.horizon=48", "data.targets=[OT, HUFL]", "data.split_borders=[10, 20, 30]"])
    save_config(cfg, tmp_path / "c.yaml")
    assert load_config(tmp_path / "c.yaml") == cfg
    assert config_from_dict(to_dict(cfg)) == cfg
    assert cfg.data.targets == ("OT", "HUFL")


def test_unknown_key_names_the_valid_keys(tmp_path):
    (tmp_path / "c.yaml").write_text("model:\n  n_head: 4\n")
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path / "c.yaml")
    assert "unknown key model.n_head" in str(err.value)
    assert "n_heads" in str(err.value) and "d_model" in str(err.value)


def test_unknown_section_is_an_error():
    with pytest.raises(ConfigError, match="unknown config section 'optim'; valid sections: data, model, train"):
        config_from_dict({"optim": {"lr": 1}})


def test_overrides_are_typed():
    cfg = apply_overrides(Config(), ["train.lr=3e-4", "train.all_positions=false", "model.n_layers=2"])
    assert cfg.train.lr == 3e-4 and cfg.train.all_positions is False and cfg.model.n_layers == 2
    with pytest.raises(ConfigError, match="model.n_layers must be of type int"):
        apply_overrides(Config(), ["model.n_layers=two"])
    with pytest.raises(ConfigError, match="must look like section.key=value"):
        apply_overrides(Config(), ["lr=3"])


@pytest.mark.parametrize(
    "override, message",
    [
        ("model.n_heads=3", r"model.n_heads \(3\) must divide model.d_model \(64\)"),
        ("model.dropout=1.5", "model.dropout must be in"),
        ("train.loss=l3", "train.loss must be one of"),
        ("train.interval_scale=local", "train.interval_scale must be one of seasonal, fixed"),
        ("train.interval_calibration=refit", "train.interval_calibration: the calibration model was removed"),
        ("train.least_squares_start=false", "train.least_squares_start: the least-squares start is now the linear"),
        ("data.fill=mean", "data.fill must be one of"),
        ("train.linear_rows=first_token", "train.linear_rows must be one of auto, every_token, last_token"),
        ("train.linear_ridge=0", r"train.linear_ridge must be positive \(or auto: chosen on the training windows\)"),
        ("data.split_ratios=[0.8, 0.2, 0.2]", "sum to at most 1"),
        ("model.patch_len=1000", "must not exceed model.context_len"),
    ],
)
def test_out_of_range_values_name_the_option(override, message):
    with pytest.raises(ConfigError, match=message):
        apply_overrides(Config(), [override])


def test_n_tokens_rounds_up_to_whole_patches():
    assert ModelConfig(context_len=100, patch_len=16).n_tokens == 7
    assert ModelConfig(context_len=96, patch_len=1).n_tokens == 96
