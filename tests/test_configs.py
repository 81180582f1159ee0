"""One run configuration: its key, the card's configurations, and the trainer's arguments it turns into."""
from tr2.configs import RunConfig, configurations, graphed
from tr2.trainargs import TrainArgs, parse


def test_to_argv_parses_back_to_the_same_run(monkeypatch):
    # the argument round trip only: the files named are checked when parsed (tests/test_bad_inputs.py), not here
    import tr2.data
    import tr2.weights
    monkeypatch.setattr(tr2.weights, "check_weights_file", lambda path, cfg: None)
    monkeypatch.setattr(tr2.data, "check_batch_order", lambda path, *a: None)
    for a in (TrainArgs(side="torch", model="tiny", mode="default", device="cpu", steps=5, seed=7, eval_interval=2,
                        eval_iters=3, dropout=0.0, tf32=False, init="i.npz", batches="o.npy", metrics="m.jsonl"),
              TrainArgs(side="cupy", model="tiny", dtype="bfloat16", device="cpu", steps=0, half_roundings=True,
                        eval_iters=2, save_init="s.npz", log_interval=1)):
        assert parse(a.to_argv()) == a


def test_keys_and_the_cards_configurations():
    card = {"models": ["tiny", "nanogpt"], "dtypes": ["float32", "bfloat16"], "torch_modes": ["eager", "default"],
            "half_roundings": [False, True, True]}
    keys = [c.key for c in configurations(card, models=["tiny"])]
    assert keys == ["tiny/float32/torch-eager", "tiny/float32/torch-default", "tiny/float32/cupy",
                    "tiny/bfloat16/torch-eager", "tiny/bfloat16/torch-default", "tiny/bfloat16/cupy", "tiny/bfloat16/cupy-hr"]
    assert [c.key for c in configurations(card, models=["tiny"], compared_only=True, cupy_first=True)][3:5] == [
        "tiny/bfloat16/cupy-hr", "tiny/bfloat16/torch-eager"]
    assert len(configurations(card)) == 14
    c = RunConfig("tiny", "bfloat16", "cupy", half_roundings=True)
    assert (c.slug, c.label, c.as_record()["build"]) == ("tiny_bfloat16_cupy-hr", "cupy half-roundings", "cupy-hr")


def test_the_cards_cuda_graph_reaches_every_cupy_run():
    card = {"models": ["nanogpt"], "dtypes": ["float32", "bfloat16", "float16"], "torch_modes": ["eager"],
            "half_roundings": [True], "cuda_graph": True}
    cupy = [c for c in configurations(card) if c.side == "cupy"]
    assert [(c.dtype, c.cuda_graph) for c in cupy] == [("float32", True), ("bfloat16", True), ("float16", True)]
    assert all(not c.cuda_graph for c in configurations(card) if c.side == "torch")
    assert cupy[1].key == "nanogpt/bfloat16/cupy-hr" and cupy[1].label == "cupy half-roundings graph"
    assert cupy[1].as_record()["cuda_graph"] is True
    assert "--cuda-graph" in cupy[1].train_args("cuda", 10).to_argv()
    assert "--cuda-graph" in cupy[2].train_args("cuda", 10).to_argv()
    assert not graphed({**card, "cuda_graph": False}) and not graphed({})
    plain = [c for c in configurations({**card, "cuda_graph": False}) if c.side == "cupy"]
    assert not any(c.cuda_graph for c in plain) and "--cuda-graph" not in plain[2].train_args("cuda", 10).to_argv()


def test_the_nanogpt_side_stands_after_the_torch_modes_where_the_card_lists_it():
    card = {"models": ["tiny"], "dtypes": ["float32"], "torch_modes": ["eager", "max-autotune"],
            "half_roundings": [False], "torch_loops": ["torch", "nanogpt"], "nanogpt_path": "/x/nanoGPT"}
    assert [c.key for c in configurations(card, nanogpt=True)] == [
        "tiny/float32/torch-eager", "tiny/float32/torch-max-autotune", "tiny/float32/nanogpt-eager",
        "tiny/float32/nanogpt-max-autotune", "tiny/float32/cupy"]
    # the stages that measure our torch side only (families, footprint) do not get it
    assert [c.side for c in configurations(card)] == ["torch", "torch", "cupy"]
    ng = configurations(card, nanogpt=True)[3]
    assert ng.label == "nanogpt max-autotune" and ng.as_record()["checkout"] == "/x/nanoGPT"
    argv = ng.train_args("cpu", 10).to_argv()
    assert argv[argv.index("--side") + 1] == "nanogpt" and argv[argv.index("--mode") + 1] == "max-autotune"
    assert argv[argv.index("--nanogpt") + 1] == "/x/nanoGPT"
    assert "checkout" not in configurations(card)[0].as_record()  # the other sides' records as before
