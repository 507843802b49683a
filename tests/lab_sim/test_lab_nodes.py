"""Lab nodes (lab/vllm_fleet_lab/nodes.py) without booting any."""



def test_booting_raises_the_inotify_limits_but_never_lowers_them(tmp_path):
    from vllm_fleet_lab import nodes

    low, high = tmp_path / "max_user_instances", tmp_path / "max_user_watches"
    low.write_text("128\n")
    high.write_text("2000000\n")
    nodes.raise_inotify_limits({str(low): 8192, str(high): 1048576})
    assert low.read_text() == "8192\n"
    assert high.read_text() == "2000000\n"
    # A limit it may not change does not stop the boot.
    nodes.raise_inotify_limits({str(tmp_path / "missing" / "x"): 1})
