import yaml, sys, copy
base = open('/work/main/params/cards/smoke.yaml').read()
S = yaml.safe_load(base)
def put(name, path, value):
    c = copy.deepcopy(S); d = c
    *h, last = path.split('.')
    for k in h: d = d[k]
    if value == 'DEL': del d[last]
    else: d[last] = value
    open(name + '.yaml', 'w').write(yaml.safe_dump(c, sort_keys=False))
cases = {
 'rounds_str': ('series.rounds', '5'), 'rounds_float': ('series.rounds', 2.0), 'rounds_bool': ('series.rounds', True),
 'rounds_zero': ('series.rounds', 0), 'steps_neg': ('series.steps', -40), 'window_out': ('series.window', [10, 80]),
 'window_rev': ('series.window', [40, 10]), 'window_3': ('series.window', [10, 20, 40]), 'window_str': ('series.window', '10-40'),
 'window_odd': ('series.window', [15, 40]), 'fwindow_out': ('families.window', [20, 50]),
 'seeds_str': ('method_a.seeds', ['1337']), 'seeds_scalar': ('method_a.seeds', 1337), 'seeds_dup': ('method_a.seeds', [1, 1]),
 'seeds_empty': ('method_a.seeds', []), 'seeds_float': ('method_a.seeds', [1.0]),
 'models_empty': ('models', []), 'models_unknown': ('models', ['gpt5']), 'models_str': ('models', 'tiny'),
 'dtypes_unknown': ('dtypes', ['float64']), 'dtypes_dup': ('dtypes', ['float32', 'float32']), 'modes_unknown': ('torch_modes', ['fast']),
 'half_str': ('half_roundings', ['no']), 'half_empty': ('half_roundings', []),
 'device_gpu': ('device', 'gpu'), 'device_none': ('device', None), 'card_bad_name': ('card', 'a b/c'), 'card_int': ('card', 5),
 'machine_empty': ('machine', ''), 'timeout_nan': ('series.timeout_s', float('nan')), 'timeout_inf': ('series.timeout_s', float('inf')),
 'timeout_str': ('series.timeout_s', '600'), 'sample_zero': ('series.sample_interval_s', 0), 'judge_from_big': ('method_a.judge_from', 1000),
 'eval_interval_big': ('method_a.eval_interval', 1000), 'eval_iters_zero': ('method_a.eval_iters', 0), 'parallel_0': ('method_a.parallel', 0),
 'parallel_99': ('method_a.parallel', 99), 'torch_mode_bad': ('method_a.torch_mode', 'fast'), 'bsteps_0': ('method_b.steps', 0),
 'bwindow_bad': ('method_b.window', 'all'), 'floors_bad': ('method_b.floors', ['twice']), 'floors_str': ('method_b.floors', 'none'),
 'also_bad': ('method_b.also', ['cupy-twice']), 'judge_steps_list': ('method_b.judge_steps', [1, 2]), 'judge_steps_unknown': ('method_b.judge_steps', {'gpt5': 3}),
 'judge_steps_neg': ('method_b.judge_steps', {'tiny': -3}), 'rules_dir': ('families.rules', 'params'), 'rules_empty': ('families.rules', ''),
 'rules_int': ('families.rules', 5), 'series_list': ('series', [1, 2]), 'series_null': ('series', None), 'series_extra': ('series.colour', 'red'),
 'series_missing_steps': ('series.steps', 'DEL'), 'loops_bad': ('torch_loops', ['nanogpt']), 'loops_dup': ('torch_loops', ['torch', 'torch']),
 'nanogpt_path_bad': ('nanogpt_path', '/nonexistent'), 'cuda_graph_str': ('cuda_graph', 'yes'), 'edition_str': ('edition', 'h200'),
 'fsteps_0': ('families.steps', 0), 'models_dupe': ('models', ['tiny', 'tiny']), 'seeds_neg': ('method_a.seeds', [-1]),
 'seeds_nested': ('method_a.seeds', [[1]]), 'models_nested': ('models', [['tiny']]), 'models_dict': ('models', {'tiny': 1}),
 'judge_steps_big': ('method_b.judge_steps', {'tiny': 1000}), 'judge_steps_bool': ('method_b.judge_steps', {'tiny': True}),
 'steps_null': ('series.steps', None), 'astep_null': ('method_a.steps', None), 'window_bool': ('series.window', [False, True]),
 'loops_nanogpt_ok': ('torch_loops', ['torch', 'nanogpt']),
}
for n, (p, v) in cases.items(): put(n, p, v)
raw = {
 'dupkey': base + 'card: smoke2\n', 'dup_nested': base.replace('  rounds: 1', '  rounds: 1\n  rounds: 2'),
 'tabs': base.replace('  rounds: 1', '\trounds: 1'), 'empty': '', 'comment_only': '# nothing\n', 'list': '- a\n', 'str': 'hello\n',
 'anchor_merge': base + 'x: &a {b: 1}\n', 'python_tag': base.replace('rounds: 1', 'rounds: !!python/object:os.system 1'),
 'yaml_int_key': base + '5: x\n', 'null_key': base + '~: x\n', 'bool_key': base.replace('card: smoke', 'card: smoke\ntrue: 1'),
 'date_card': base.replace('card: smoke', 'card: 2026-12-05'), 'list_key': base + '? [a, b]\n: c\n',
 'dup_in_list_map': base, 'bom': '\ufeff' + base, 'crlf': base.replace('\n', '\r\n'), 'nested_dup_top_key_different_case': base + 'Card: x\n',
 'seeds_hex': base.replace('seeds: [1337]', 'seeds: [0x539]'), 'seeds_big': base.replace('seeds: [1337]', 'seeds: [1e3]'),
 'octal_rounds': base.replace('rounds: 1', 'rounds: 0o1'), 'rounds_underscore': base.replace('rounds: 1', 'rounds: 1_0'),
 'yaml_multi_doc': base + '---\ncard: other\n', 'anchor_alias_bomb': 'a: &a ["x","x","x"]\nb: &b [*a,*a,*a]\nc: [*b,*b,*b]\n',
}
for n, t in raw.items(): open(n + '.yaml', 'w', encoding='utf-8').write(t)
open('latin1.yaml', 'wb').write(base.replace('machine: cpu', 'machine: cpü').encode('latin-1'))
open('utf16.yaml', 'wb').write(base.encode('utf-16'))
