"""scripts/sass_dynamic.py (Nsight Compute's source page: executed instructions and stall samples by opcode) and
scripts/sass_loop_mix.py (nvdisasm's listing: the instruction mix of a kernel's product loops), on small listings
written here in the tools' formats."""
import gzip
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "scripts"))
import sass_dynamic as sd  # noqa: E402
import sass_float_ops as fo  # noqa: E402
import sass_loop_mix as lm  # noqa: E402

HEADER = ('"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)",'
          '"Instructions Executed","stall_wait","stall_no_inst","stall_wait (Not Issued)"')


def _row(addr, source, samples, executed, wait, no_inst):
    return f'"{addr}","      {source}","{samples}","0","{executed}","{wait}","{no_inst}","0"'


def test_executed_instructions_and_stalls_by_opcode(tmp_path, capsys):
    lines = ['"Kernel Name","k_demo",', HEADER,
             _row("0x10", "FFMA.FTZ R1, R2, R3, R4", 5, 100, 4, 1),
             _row("0x20", "@!P0  FFMA R1, R2, R3, R4", 1, 50, 0, 1),     # a guard: still FFMA
             _row("0x30", "MUFU.EX2 R5, R5", 3, 100, 1, 0),
             _row("0x40", "BRA 0x10", 0, 0, 0, 0)]
    path = tmp_path / "k.csv.gz"
    with gzip.open(path, "wt") as f:
        f.write("\n".join(lines) + "\n")
    kernel, rows = sd.read(str(path))
    assert kernel == "k_demo" and len(rows) == 4
    assert [sd.opcode(r["Source"]) for r in rows] == ["FFMA", "FFMA", "MUFU", "BRA"]
    sd.summarize(str(path), top=2)
    out = capsys.readouterr().out
    assert "k_demo: 250 warp instructions executed, 9 stall samples, 4 SASS lines" in out
    ffma = next(line for line in out.splitlines() if line.strip().startswith("FFMA"))
    assert ffma.split() == ["FFMA", "150", "60.0%", "6", "66.7%"]
    listed = [line.split()[0] for line in out.splitlines()[2:] if not line.strip().startswith("stall")]
    assert listed == ["FFMA", "MUFU"]   # the top 2 opcodes by executed count, BRA left out
    assert "stall samples by reason: wait 5 (56%), no_inst 2 (22%)" in out   # the Not Issued columns left out


def test_lines_by_executed_count(tmp_path):
    lines = ['"Kernel Name","k_demo",', HEADER,
             _row("0x10", "STG.E [R2.64], R4", 0, 768, 0, 0),
             _row("0x20", "STG.E [R2.64+0x4], R5", 0, 768, 0, 0),
             _row("0x30", "@P0 STSM.16.M88.4 [R6], R8", 0, 96, 0, 0),
             _row("0x40", "STS [R1], R2", 0, 0, 0, 0),                # never executed: not listed
             _row("0x50", "FFMA R1, R2, R3, R4", 0, 5000, 0, 0)]     # no prefix given: not listed
    path = tmp_path / "k.csv"
    path.write_text("\n".join(lines) + "\n")
    assert sd.lines_by_count(str(path), ["STG", "STS"]) == [("STG.E", 768, 2), ("STSM.16.M88.4", 96, 1)]


def test_the_lines_with_the_most_stall_samples(tmp_path):
    lines = ['"Kernel Name","k_demo",', HEADER,
             _row("0x10", "FFMA R1, R2, R3, R4", 2, 100, 2, 0),
             _row("0x20", "@!P1  BRA 0x10", 9, 55, 1, 8),
             _row("0x30", "MUFU.EX2 R5, R5", 0, 100, 0, 0),
             _row("0x40", "STG.E [R2.64], R4", 4, 6, 4, 0)]
    path = tmp_path / "k.csv"
    path.write_text("\n".join(lines) + "\n")
    # the two heaviest, in the kernel's order, each with its reasons largest first (a reason of 0 left out)
    assert sd.hot_lines(str(path), 2) == [(1, "@!P1 BRA 0x10", 9, 55, [("no_inst", 8), ("wait", 1)]),
                                          (3, "STG.E [R2.64], R4", 4, 6, [("wait", 4)])]
    assert sd.main([str(path), "--hot", "1"]) == 0


LISTING = """\t.section\t.text.k_demo,"ax",@progbits
.text.k_demo:
        /*0000*/                   MOV R1, c[0x0][0x28] ;
.L_x_0:
        /*0010*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], RZ, !UPT ;
        /*0020*/                   MUFU.EX2 R2, R2 ;
        /*0030*/                   R2UR UR8, R3 ;
        /*0040*/              @!P0 BRA `(.L_x_0) ;
        /*0050*/                   BRA `(.L_x_1) ;
.L_x_1:
        /*0060*/                   EXIT ;
.text.k_other:
        /*0000*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], RZ, !UPT ;
"""


def test_the_loops_holding_products_and_their_mix(tmp_path, capsys):
    path = tmp_path / "k.sass"
    path.write_text(LISTING)
    ins, labels = lm.instructions(LISTING.split("\n"), "k_demo")
    assert len(ins) == 7 and labels == {".L_x_0": 0x10, ".L_x_1": 0x60}   # k_other's line not taken
    found = list(lm.loops(ins, labels))
    assert len(found) == 1   # the forward branch to .L_x_1 is no loop
    start, end, ops = found[0]
    assert (start, end) == (0x10, 0x40) and ops["HGMMA"] == 1 and ops["R2UR"] == 1 and sum(ops.values()) == 4
    assert lm.main([str(path), "k_demo", "1"]) == 0
    out = capsys.readouterr().out
    assert "k_demo: 7 instructions" in out and "loop 0x10-0x40: 4 instructions; HGMMA 1 MUFU 1" in out
    assert lm.main([str(path), "k_demo", "2"]) == 0 and "loop" not in capsys.readouterr().out   # too few products


FLOATS = """.text.k_a:
        /*0000*/                   FMUL R1, R2, R3 ;
        /*0010*/                   FADD R1, R1, R4 ;
        /*0020*/                   FFMA.FTZ R5, R2, R3, R4 ;
        /*0030*/                   FMNMX R6, R5, R1, !PT ;
.text.k_b:
        /*0000*/                   FFMA R1, R2, R3, R4 ;
        /*0010*/                   FMUL R1, R2, R3 ;
        /*0020*/                   FFMA.FTZ R5, R2, R3, R4 ;
"""


def test_float_ops_in_order_and_compared(tmp_path, capsys):
    path = tmp_path / "f.sass"
    path.write_text(FLOATS)
    assert fo.float_ops(str(path), "k_a") == ["FMUL", "FADD", "FFMA.FTZ"]   # FMNMX is no arithmetic rounding
    assert fo.main([str(path), "k_a", str(path), "k_b", str(path), "k_a"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("FFMA 1 FADD 1 FMUL 1")
    assert out[1].endswith("FFMA 2 FADD 0 FMUL 1  same sequence as the first: no")   # a contraction moved
    assert out[2].endswith("same sequence as the first: yes")
    assert fo.main([str(path)]) == 2


def test_runs_of_lines_with_one_execution_count(tmp_path, capsys):
    lines = ['"Kernel Name","k_demo",', HEADER,
             _row("0x10", "LDG.E.128 R4, desc[UR4][R2.64]", 6, 8, 1, 5),     # the prologue: once a warp
             _row("0x20", "FFMA R1, R4, R5, R1", 9, 8, 9, 0),
             _row("0x30", "BRA 0x90", 1, 0, 1, 0),                           # never executed: skipped, no break
             _row("0x40", "FFMA R1, R2, R3, R4", 2, 8, 2, 0),
             _row("0x50", "HGMMA.64x64x8.F32.TF32 R8, R4, gdesc[UR8], R8", 3, 80, 3, 0),   # the loop: 10 times
             _row("0x60", "MUFU.EX2 R5, R5", 1, 80, 0, 1),
             _row("0x70", "STG.E [R2.64], R8", 1, 8, 1, 0)]                  # the end: once a warp again
    path = tmp_path / "k.csv"
    path.write_text("\n".join(lines) + "\n")
    found = sd.runs(str(path))
    assert [(r["first"], r["last"], r["executed"], r["lines"], r["samples"]) for r in found] == [
        (0, 3, 8, 3, 17), (4, 5, 80, 2, 4), (6, 6, 8, 1, 1)]
    assert found[0]["reasons"] == {"wait": 12, "no_inst": 5} and found[0]["opcodes"] == {"FFMA": 2, "LDG": 1}
    assert sd.main([str(path), "--runs", "20"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "k_demo: 22 stall samples in 3 runs of lines; those with 20% or more:"
    assert len(out) == 2 and out[1].split()[:2] == ["lines", "0-"] and "17 samples (77.3%): wait 12, no_inst 5" in out[1]


def test_bad_arguments_are_refused_by_name(tmp_path, capsys):
    path = tmp_path / "k.csv"
    path.write_text("\n".join(['"Kernel Name","k_demo",', HEADER,
                               _row("0x10", "FFMA R1, R2, R3, R4", 2, 8, 2, 0)]) + "\n")
    page = str(path)
    refused = {
        (page, "--runs"): "--runs needs a value: PERCENT",
        (page, "--runs", "half"): "--runs 'half': the value is PERCENT",
        (page, "--runs", "120"): "--runs '120': the value is PERCENT",
        (page, "--hot", "0"): "--hot '0': the value is N",
        (page, "--top", "2.5"): "--top '2.5': the value is N",
        (page, "--lines", "STG,"): "--lines 'STG,': the value is PREFIXES",
        (page, "--hottest", "3"): "unknown option '--hottest': allowed are --top, --lines, --hot, --runs",
        (page, "--hot", "3", "--runs", "5"): "'--runs' given after '--hot': one option a call",
        ("--runs", "5"): "no source page given",
        (str(tmp_path / "absent.csv"), "--runs", "5"): "no such file: " + str(tmp_path / "absent.csv"),
    }
    for argv, message in refused.items():
        assert sd.main(list(argv)) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("sass_dynamic.py: " + message), (argv, err)
    assert sd.main(["--help"]) == 0 and "--runs PERCENT" in capsys.readouterr().out
    assert sd.main([page, "--hot", "1"]) == 0 and "FFMA R1, R2, R3, R4" in capsys.readouterr().out
