#!/usr/bin/python3
"""gemmi_dump.py — reference dump of mmCIF files through gemmi, for tests/test_cif.c.

Reads each file with gemmi.cif (the Debian python3-gemmi package; run it with
/usr/bin/python3) and applies to the _atom_site table exactly the reading rules of
src/data/structure.h: first model only, no hydrogens (H, D) or waters (HOH, DOD, WAT),
microheterogeneity resolved by the highest-occupancy altloc row of a residue position,
then per atom the altloc with the highest occupancy (first in the file on ties); chains
are runs of label_asym_id, residues runs of (label_seq_id, auth_seq_id, ins code, comp).
Not a structure reader: it only produces the reference the C reader is compared with.

Usage: gemmi_dump.py FILE...        Output, tab-separated, per file:
  FILE <path>
  META <resolution|nan> <methods joined by "; "> <n_entity> <n_entity_poly_seq> <n_struct_conn>
       <n_covalent> <n_assembly> <n_assembly_gen> <n_oper>
  ENTITY <id> <type> <entity_poly.type or ""> <one-letter code (can) without whitespace>
  CHAIN <label_asym_id> <n_residues> <n_atoms>
  A <atom_name> <comp_id> <element> <x> <y> <z>      (one per atom of the chain)
  END
A file gemmi cannot read gives "ERROR <path> <message>" instead of its block.
"""
import io
import sys

import gemmi

TAGS = ['type_symbol', 'label_atom_id', 'label_comp_id', 'label_asym_id', 'Cartn_x',
        'Cartn_y', 'Cartn_z', '?label_alt_id', '?label_seq_id', '?pdbx_PDB_ins_code',
        '?occupancy', '?auth_seq_id', '?pdbx_PDB_model_num']
(TYPE, ATOM, COMP, ASYM, X, Y, Z, ALT, SEQ, INS, OCC, AUTH, MODEL) = range(len(TAGS))
WATERS = ('HOH', 'DOD', 'WAT')


def value(row, i):
    """The value as the C reader sees it: '' for a missing column, '?' or '.'."""
    if not row.has(i):
        return ''
    raw = row[i]
    return '' if gemmi.cif.is_null(raw) else gemmi.cif.as_string(raw)


def occupancy(r):
    return float(r[OCC]) if r[OCC] else 1.0


def column(block, tag):
    """Values of one tag ('' for null), [] when absent."""
    col = block.find_values(tag)
    return ['' if gemmi.cif.is_null(v) else gemmi.cif.as_string(v) for v in col]


def write_meta(block, w):
    res = float('nan')
    for tag in ('_refine.ls_d_res_high', '_reflns.d_resolution_high',
                '_em_3d_reconstruction.resolution'):
        v = column(block, tag)
        if v and v[0]:
            res = float(v[0])
            break
    methods = '; '.join(m for m in column(block, '_exptl.method') if m)
    ids = column(block, '_entity.id')
    types = column(block, '_entity.type')
    polyseq = sum(1 for e in column(block, '_entity_poly_seq.entity_id') if e in ids)
    conn = column(block, '_struct_conn.conn_type_id')
    cov = sum(1 for c in conn if c.lower().startswith('covale') or c.lower() == 'disulf')
    asm = column(block, '_pdbx_struct_assembly.id')
    gens = sum(1 for a in column(block, '_pdbx_struct_assembly_gen.assembly_id') if a in asm)
    opers = column(block, '_pdbx_struct_oper_list.id')
    w('META\t%r\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n' % (
        res, methods, len(ids), polyseq, len(conn), cov, len(asm), gens, len(opers)))
    poly = {}
    pe = column(block, '_entity_poly.entity_id')
    pt = column(block, '_entity_poly.type')
    pc = column(block, '_entity_poly.pdbx_seq_one_letter_code_can')
    for i, e in enumerate(pe):
        if e not in poly:
            poly[e] = (pt[i] if pt else '', ''.join((pc[i] if pc else '').split()))
    for i, e in enumerate(ids):
        ptype, seq = poly.get(e, ('', ''))
        w('ENTITY\t%s\t%s\t%s\t%s\n' % (e, types[i] if types else '', ptype, seq))


def dump(path, out):
    block = gemmi.cif.read(path)[0]
    table = block.find('_atom_site.', TAGS)
    rows = [[value(row, i) for i in range(len(TAGS))] for row in table]
    keep = [False] * len(rows)
    model0 = rows[0][MODEL] if rows else ''
    for k, r in enumerate(rows):
        keep[k] = (r[MODEL] == model0 and r[TYPE].upper() not in ('H', 'D')
                   and r[COMP] not in WATERS)
    alt = [k for k, r in enumerate(rows) if keep[k] and r[ALT]]

    def res_key(k):
        r = rows[k]
        return (r[ASYM], r[SEQ], r[AUTH], r[INS])

    groups = {}
    for k in alt:
        groups.setdefault(res_key(k), []).append(k)
    for ks in groups.values():
        if len({rows[k][COMP] for k in ks}) > 1:
            best = ks[0]
            for k in ks[1:]:
                if occupancy(rows[k]) > occupancy(rows[best]):
                    best = k
            for k in ks:
                if rows[k][COMP] != rows[best][COMP]:
                    keep[k] = False
        by_atom = {}
        for k in ks:
            if keep[k]:
                by_atom.setdefault(rows[k][ATOM], []).append(k)
        for ak in by_atom.values():
            best = ak[0]
            for k in ak[1:]:
                if occupancy(rows[k]) > occupancy(rows[best]):
                    best = k
            for k in ak:
                if k != best:
                    keep[k] = False

    chains = []  # [asym, n_res, atoms]
    prev = None
    for k, r in enumerate(rows):
        if not keep[k]:
            continue
        if prev is None or r[ASYM] != prev[ASYM]:
            chains.append([r[ASYM], 0, []])
            prev = None
        rkey = (r[SEQ], r[AUTH], r[INS], r[COMP])
        if prev is None or rkey != (prev[SEQ], prev[AUTH], prev[INS], prev[COMP]):
            chains[-1][1] += 1
        chains[-1][2].append(r)
        prev = r
    w = out.write
    w('FILE\t%s\n' % path)
    write_meta(block, w)
    for asym, nres, atoms in chains:
        w('CHAIN\t%s\t%d\t%d\n' % (asym, nres, len(atoms)))
        for r in atoms:
            w('A\t%s\t%s\t%s\t%r\t%r\t%r\n' % (r[ATOM], r[COMP], r[TYPE], float(r[X]),
                                              float(r[Y]), float(r[Z])))
    w('END\n')


def main():
    out = sys.stdout
    for path in sys.argv[1:]:
        buf = io.StringIO()  # a file's block is written whole, or only its ERROR line
        try:
            dump(path, buf)
            out.write(buf.getvalue())
        except Exception as e:  # report and go on: the C test counts it as a failure
            out.write('ERROR\t%s\t%s\n' % (path, str(e).replace('\n', ' ')))
    out.flush()


if __name__ == '__main__':
    main()
