import pytest
from helpers import make_frame

import tsformer
from tsformer.errors import DataError
from tsformer.spelling import in_python_terms, python_terms


@pytest.mark.parametrize(
    "cli, python",
    [
        ("name it with --time-col", "name it with time_col="),
        ("train with --set data.floor=zero", 'train with config={"data.floor": "zero"}'),
        ("lower the rate (--set train.lr=...) or", 'lower the rate (config={"train.lr": ...}) or'),
        ("pass --fill ffill or zero", 'pass config={"data.fill": "ffill"} or config={"data.fill": "zero"}'),
        ("train with --fill zero where", 'train with config={"data.fill": "zero"} where'),
        ("several: --id-col store --id-col item)", 'several: id_col=["store", "item"])'),
        ("--target a --target b --target c to", 'target=["a", "b", "c"] to'),
        ("pass --future CSV with their values", "pass future=(a DataFrame or a CSV path) with their values"),
        ("--split must be test or val", "split= must be test or val"),
        ("sort the file or pass --sort", 'sort the file or pass config={"data.sort": True}'),
        ("name them with --static-cov, or drop --static", "name them with static_covs=, or drop static_df="),
        ("retrain at each origin with --refit", "retrain at each origin with refit=True"),
        ("or --freq to state it", "or config key data.freq to state it"),  # no value: the key alone
        ("state it with --freq B (the later", 'state it with config={"data.freq": "B"} (the later'),
        (
            "--freq QE-DEC (x) or --freq 1h30min",
            'config={"data.freq": "QE-DEC"} (x) or config={"data.freq": "1h30min"}',
        ),
        ("(--fill zero fills them)", '(config={"data.fill": "zero"} fills them)'),
        ("ask for --windows 4 or fewer", "ask for windows=4 or fewer"),
        ("set --context-len N", 'set config={"model.context_len": N}'),
        ("--target to forecast them", "target= to forecast them"),  # prose after a flag is no value
        ("--set train.fallback=false", 'config={"train.fallback": False}'),
        (
            "finish it with: tsformer train --resume --out runs/x",
            "finish it with: tsformer train --resume --out runs/x",
        ),
    ],
)
def test_flags_become_keywords_and_config_keys_outside_whole_commands(cli, python):
    assert python_terms(cli) == python
    assert python_terms(f"{cli}; then --target") == f"{python}; then target="


def test_an_error_keeps_its_type_and_traceback_and_is_respelled():
    @in_python_terms
    def refuse():
        raise DataError("no time column found; name it with --time-col")

    with pytest.raises(DataError) as caught:
        refuse()
    assert str(caught.value) == "no time column found; name it with time_col="
    assert caught.traceback[-1].name == "refuse"  # raised where it was, not re-raised by the wrapper


def test_the_python_api_names_its_own_keywords():
    frame = make_frame(40).rename(columns={"date": "when"})
    frame["when"] = frame["when"].astype(str) + " x"  # no column reads as time
    with pytest.raises(DataError, match=r"name it with time_col=$"):
        tsformer.fit(frame, horizon=4)
    unsorted = make_frame(40).iloc[::-1]
    with pytest.raises(DataError, match=r'config=\{"data.sort": True\}'):
        tsformer.fit(unsorted, horizon=4)
