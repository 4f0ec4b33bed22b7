//! Lowering a program to register code: roles of values (register,
//! immediate, fused product), registers from liveness, inputs sunk to their
//! first reader, then packing ([`super::code`]).

use super::code::{encode_runs, kind, strided_len, Ins, RegisterCode};
use crate::program::ir::{Instr, Program, Var};
use crate::program::op::Op;
use crate::program::passes::SCHEDULE_WINDOW;
use crate::rules::Prim;

/// A value's role in the lowered code.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) enum Role {
    /// Computed into a register.
    Register,
    /// A constant read only as an immediate: no register, no instruction.
    Immediate,
    /// A constant that some instruction reads from a register.
    ConstRegister,
    /// A product computed inside its one consumer.
    FusedProduct,
}

/// An instruction before register allocation: operands are value numbers.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pending {
    ins: Ins,
    dst: u32,
    operands: [u32; 3],
    n_operands: u8,
}

/// The constant a value is, if it is one.
pub(crate) fn constant(ops: &[Instr], v: Var) -> Option<f64> {
    ops.get(v.index()).and_then(Instr::as_const)
}

/// Whether `prim` takes a constant operand as an immediate (the four
/// arithmetic operations), given its operands.
pub(crate) fn takes_immediate(ops: &[Instr], prim: Prim, args: &[Var]) -> Option<usize> {
    if !matches!(prim, Prim::Add | Prim::Sub | Prim::Mul | Prim::Div) || args.len() != 2 {
        return None;
    }
    match (constant(ops, args[0]), constant(ops, args[1])) {
        (Some(_), None) => Some(0),
        (None, Some(_)) => Some(1),
        _ => None,
    }
}

impl Program {
    /// Lowers the program to register code.
    pub(crate) fn lower_to_registers(&self) -> RegisterCode {
        let ops = &self.code;
        let n = ops.len();
        // How often each value is read, and by whom last.
        let mut uses = vec![0u32; n];
        for op in ops {
            for a in op.operands() {
                uses[a.index()] += 1;
            }
        }
        let mut pinned = vec![false; n]; // outputs and guard operands
        for v in self
            .outputs
            .iter()
            .chain(self.guards.iter().flat_map(|g| [&g.a, &g.b]))
        {
            pinned[v.index()] = true;
        }

        // Roles: constants read only as immediates need nothing; products
        // used once by a sum or difference are fused into it.
        let mut role = vec![Role::Register; n];
        let mut immediate_uses = vec![0u32; n];
        let mut fused_into = vec![u32::MAX; n];
        for (i, op) in ops.iter().enumerate() {
            let Some(prim) = op.prim() else {
                continue;
            };
            let args = op.operands();
            if let Some(j) = takes_immediate(ops, prim, args) {
                immediate_uses[args[j].index()] += 1;
                continue;
            }
            if matches!(prim, Prim::Add | Prim::Sub) {
                // Fuse one operand that is a product read only here.
                let fusable = |v: Var| {
                    let k = v.index();
                    let a = ops[k].operands();
                    ops[k].prim() == Some(Prim::Mul)
                        && a.len() == 2
                        && takes_immediate(ops, Prim::Mul, a).is_none()
                        && constant(ops, a[0]).is_none()
                        && constant(ops, a[1]).is_none()
                        && uses[k] == 1
                        && !pinned[k]
                        && fused_into[k] == u32::MAX
                };
                if let Some(&m) = args.iter().find(|&&v| fusable(v)) {
                    // Not both operands: the other stays a register.
                    fused_into[m.index()] = i as u32;
                    role[m.index()] = Role::FusedProduct;
                }
            }
        }
        for (i, op) in ops.iter().enumerate() {
            if op.is_const() {
                role[i] = if immediate_uses[i] == uses[i] && !pinned[i] {
                    Role::Immediate
                } else {
                    Role::ConstRegister
                };
            }
        }

        // Instructions over value numbers.
        let mut pending: Vec<Pending> = Vec::with_capacity(n);
        let mut customs = Vec::new();
        let reg = |v: Var| v.index() as u32;
        for (i, op) in ops.iter().enumerate() {
            if role[i] != Role::Register {
                continue;
            }
            let dst = i as u32;
            let mut p = |ins: Ins, operands: &[u32]| {
                let mut o = [0; 3];
                o[..operands.len()].copy_from_slice(operands);
                pending.push(Pending {
                    ins,
                    dst,
                    operands: o,
                    n_operands: operands.len() as u8,
                });
            };
            match op.op() {
                Op::Input(k) => p(Ins::Input { dst, k }, &[]),
                Op::Const(_) => {}
                Op::Custom { rule, args } => {
                    let a = args.as_slice();
                    let mut o = [0; 3];
                    for (slot, &v) in o.iter_mut().zip(a) {
                        *slot = reg(v);
                    }
                    customs.push((rule, o, a.len() as u8));
                    let slot = (customs.len() - 1) as u32;
                    p(Ins::Custom { dst, slot }, &o[..a.len()]);
                }
                Op::Apply { prim, param, args } => {
                    let a = args.as_slice();
                    if let Some(j) = takes_immediate(ops, prim, a) {
                        let k = constant(ops, a[j]).unwrap_or(f64::NAN);
                        let x = reg(a[1 - j]);
                        let ins = match (prim, j) {
                            (Prim::Add, 1) => Ins::AddK { dst, a: x, k },
                            (Prim::Add, _) => Ins::KAdd { dst, a: x, k },
                            (Prim::Sub, 1) => Ins::SubK { dst, a: x, k },
                            (Prim::Sub, _) => Ins::KSub { dst, a: x, k },
                            (Prim::Mul, 1) => Ins::MulK { dst, a: x, k },
                            (Prim::Mul, _) => Ins::KMul { dst, a: x, k },
                            (Prim::Div, 1) => Ins::DivK { dst, a: x, k },
                            _ => Ins::KDiv { dst, a: x, k },
                        };
                        p(ins, &[x]);
                        continue;
                    }
                    let fused = a.iter().position(|v| fused_into[v.index()] == i as u32);
                    if let Some((j, m)) = fused.map(|j| (j, ops[a[j].index()].operands())) {
                        let (x, y) = (reg(m[0]), reg(m[1]));
                        let c = reg(a[1 - j]);
                        let ins = match (prim, j) {
                            (Prim::Add, 0) => Ins::MulAdd { dst, a: x, b: y, c },
                            (Prim::Add, _) => Ins::AddMul { dst, a: x, b: y, c },
                            (Prim::Sub, 0) => Ins::MulSub { dst, a: x, b: y, c },
                            _ => Ins::SubMul { dst, a: x, b: y, c },
                        };
                        p(ins, &[x, y, c]);
                        continue;
                    }
                    let mut o = [0u32; 3];
                    for (slot, &v) in o.iter_mut().zip(a) {
                        *slot = reg(v);
                    }
                    let o = &o[..a.len().min(3)];
                    let ins = match (prim, o.len()) {
                        (Prim::Add, 2) => Ins::Add {
                            dst,
                            a: o[0],
                            b: o[1],
                        },
                        (Prim::Sub, 2) => Ins::Sub {
                            dst,
                            a: o[0],
                            b: o[1],
                        },
                        (Prim::Mul, 2) => Ins::Mul {
                            dst,
                            a: o[0],
                            b: o[1],
                        },
                        (Prim::Div, 2) => Ins::Div {
                            dst,
                            a: o[0],
                            b: o[1],
                        },
                        (Prim::Neg, 1) => Ins::Neg { dst, a: o[0] },
                        (_, 1) => Ins::Unary {
                            dst,
                            a: o[0],
                            prim,
                            param,
                        },
                        (_, 2) => Ins::Binary {
                            dst,
                            a: o[0],
                            b: o[1],
                            prim,
                            param,
                        },
                        _ => Ins::Ternary {
                            dst,
                            a: o[0],
                            b: o.get(1).copied().unwrap_or(0),
                            c: o.get(2).copied().unwrap_or(0),
                            prim,
                        },
                    };
                    p(ins, o);
                }
            }
        }

        // A program longer than a scheduling window is first given scratch
        // registers (see `allocate`); if less than half of its code then
        // comes out as strided runs, it is not loop-like, and the free
        // list alone keeps its registers fewer and in cache. A shorter
        // program fits in cache either way and takes the free list at once.
        let long = n > SCHEDULE_WINDOW;
        let mut alloc = if long {
            allocate(ops, &role, &pinned, pending.clone(), true)
        } else {
            allocate(ops, &role, &pinned, std::mem::take(&mut pending), false)
        };
        let mut encoded = encode_runs(&alloc.code);
        if long && 2 * strided_len(&encoded.1, &encoded.2) <= alloc.code.len() {
            alloc = allocate(ops, &role, &pinned, pending, false);
            encoded = encode_runs(&alloc.code);
        }
        let Allocation {
            code,
            map,
            n_regs,
            consts,
        } = alloc;
        for c in &mut customs {
            for r in &mut c.1[..c.2 as usize] {
                *r = map[*r as usize];
            }
        }
        let (other, runs, packed) = encoded;
        let strided = strided_len(&runs, &packed);
        let len = code.len();
        RegisterCode {
            other,
            len,
            strided,
            runs,
            packed,
            consts,
            customs,
            outputs: self.outputs.iter().map(|v| map[v.index()]).collect(),
            guard_regs: self
                .guards
                .iter()
                .map(|g| (map[g.a.index()], map[g.b.index()]))
                .collect(),
            n_regs: n_regs as usize,
        }
    }
}

/// Register code before packing: the instructions over registers, the
/// register of each value, how many registers, and the constants loaded
/// into registers.
pub(crate) struct Allocation {
    code: Vec<Ins>,
    map: Vec<u32>,
    n_regs: u32,
    consts: Vec<(u32, f64)>,
}

/// Gives the values of `pending` registers. With `long`, inputs move to
/// their first reading run ([`sink_inputs`]) and values read soon after
/// they are made take scratch registers by position (a ring), the layout
/// that makes strided runs; otherwise every value takes a register from
/// a last-in first-out free list.
pub(crate) fn allocate(
    ops: &[Instr],
    role: &[Role],
    pinned: &[bool],
    mut pending: Vec<Pending>,
    long: bool,
) -> Allocation {
    let n = ops.len();
    if long {
        pending = sink_inputs(pending, n);
    }

    // Liveness: where each value is made and last read; outputs and
    // guard operands live to the end.
    const END: u32 = u32::MAX;
    let mut made = vec![0u32; n];
    let mut last = vec![0u32; n];
    let mut read = vec![false; n];
    for (t, q) in pending.iter().enumerate() {
        made[q.dst as usize] = t as u32;
        for &v in &q.operands[..q.n_operands as usize] {
            last[v as usize] = t as u32;
            read[v as usize] = true;
        }
    }
    for (i, &pin) in pinned.iter().enumerate() {
        if pin {
            last[i] = END;
        }
    }

    // Registers: constants read from registers first (never freed).
    // Then, in a long program, a value whose last read comes fewer
    // than SCHEDULE_WINDOW instructions after it is made takes the
    // scratch register at its position modulo that length (a ring: the
    // value that next takes it is made after the last read). A run of
    // one operation over consecutive instructions then writes
    // consecutive registers, and reads registers that step evenly, so
    // it is stored as a strided run. The other values take registers by
    // a linear scan with a last-in first-out free list.
    let ring = SCHEDULE_WINDOW as u32;
    let local = |v: u32| {
        let v = v as usize;
        long && read[v] && last[v] != END && last[v] - made[v] < ring
    };
    let mut map = vec![u32::MAX; n];
    let mut n_regs = 0u32;
    let mut consts = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        if let (Some(c), Role::ConstRegister) = (op.as_const(), role[i]) {
            map[i] = n_regs;
            consts.push((n_regs, c));
            n_regs += 1;
        }
    }
    let scratch = n_regs;
    if long {
        n_regs += ring;
    }
    let mut free: Vec<u32> = Vec::new();
    let mut code = Vec::with_capacity(pending.len());
    for (t, q) in pending.iter().enumerate() {
        let operands = &q.operands[..q.n_operands as usize];
        // Operands are read before the destination is written, so a
        // register freed here may be the destination.
        for (j, &v) in operands.iter().enumerate() {
            let first = operands[..j].iter().all(|&w| w != v);
            if first
                && last[v as usize] == t as u32
                && role[v as usize] == Role::Register
                && !local(v)
            {
                free.push(map[v as usize]);
            }
        }
        let d = q.dst as usize;
        let dst = if local(q.dst) {
            scratch + t as u32 % ring
        } else {
            let dst = free.pop().unwrap_or_else(|| {
                n_regs += 1;
                n_regs - 1
            });
            if !read[d] && !pinned[d] {
                // Never read (dead code the passes left): free at once.
                free.push(dst);
            }
            dst
        };
        map[d] = dst;
        code.push(rename(q.ins, &map));
    }
    Allocation {
        code,
        map,
        n_regs,
        consts,
    }
}

/// `pending` with each input moved to just before the run of one kind
/// ([`kind`]) that first reads it, so that an input is loaded next to its
/// use rather than all of them at the start (a stage of a staged program
/// receives its inputs first). The moved inputs of a run are one run of
/// loads: those its instructions read as first operands, in order, then
/// those read as second operands, and so on. Inputs never read keep their
/// place at the start.
pub(crate) fn sink_inputs(pending: Vec<Pending>, n: usize) -> Vec<Pending> {
    let is_input = |q: &Pending| matches!(q.ins, Ins::Input { .. });
    // Where each input is in `pending`.
    let mut input_at = vec![usize::MAX; n];
    for (t, q) in pending.iter().enumerate() {
        if is_input(q) {
            input_at[q.dst as usize] = t;
        }
    }
    // (start of the run that first reads it, operand slot, input).
    let mut first_reads: Vec<(usize, usize, u32)> = Vec::new();
    let mut claimed = vec![false; n];
    let mut run: Option<(usize, u8)> = None;
    for (t, q) in pending.iter().enumerate() {
        if is_input(q) {
            continue;
        }
        let k = kind(&q.ins);
        let start = match run {
            Some((start, rk)) if rk == k => start,
            _ => t,
        };
        run = Some((start, k));
        for (slot, &v) in q.operands[..q.n_operands as usize].iter().enumerate() {
            let v = v as usize;
            if input_at[v] != usize::MAX && !claimed[v] {
                claimed[v] = true;
                first_reads.push((start, slot, v as u32));
            }
        }
    }
    // Within a run, the inputs its instructions read first as their first
    // operands, then those read as their second, …: consecutive registers
    // for each operand, so the run stays strided.
    first_reads.sort_by_key(|&(start, slot, _)| (start, slot));
    let mut out = Vec::with_capacity(pending.len());
    out.extend(
        pending
            .iter()
            .filter(|q| is_input(q) && !claimed[q.dst as usize]),
    );
    let mut next = first_reads.iter().peekable();
    for (t, q) in pending.iter().enumerate() {
        if is_input(q) {
            continue;
        }
        while let Some(&(_, _, v)) = next.next_if(|&&(at, _, _)| at == t) {
            out.push(pending[input_at[v as usize]]);
        }
        out.push(*q);
    }
    out
}

/// `ins` with its operand and destination value numbers replaced by
/// registers.
pub(crate) fn rename(mut ins: Ins, map: &[u32]) -> Ins {
    for_each_register(&mut ins, |v| *v = map[*v as usize]);
    ins
}

/// Calls `f` on each register field of `ins` (destination and operands).
pub(crate) fn for_each_register(ins: &mut Ins, mut f: impl FnMut(&mut u32)) {
    match ins {
        Ins::Input { dst, .. } | Ins::Custom { dst, .. } => f(dst),
        Ins::Neg { dst, a }
        | Ins::AddK { dst, a, .. }
        | Ins::KAdd { dst, a, .. }
        | Ins::SubK { dst, a, .. }
        | Ins::KSub { dst, a, .. }
        | Ins::MulK { dst, a, .. }
        | Ins::KMul { dst, a, .. }
        | Ins::DivK { dst, a, .. }
        | Ins::KDiv { dst, a, .. }
        | Ins::Unary { dst, a, .. } => {
            f(dst);
            f(a);
        }
        Ins::Add { dst, a, b }
        | Ins::Sub { dst, a, b }
        | Ins::Mul { dst, a, b }
        | Ins::Div { dst, a, b }
        | Ins::Binary { dst, a, b, .. } => {
            f(dst);
            f(a);
            f(b);
        }
        Ins::MulAdd { dst, a, b, c }
        | Ins::AddMul { dst, a, b, c }
        | Ins::MulSub { dst, a, b, c }
        | Ins::SubMul { dst, a, b, c }
        | Ins::Ternary { dst, a, b, c, .. } => {
            f(dst);
            f(a);
            f(b);
            f(c);
        }
    }
}
