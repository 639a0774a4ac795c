//! Element types and reduction operations, the input every rank contributes, and the check of
//! the result. Inputs are small integers chosen so that every partial result is exactly
//! representable in every type: the reduced value does not depend on the order in which ranks
//! combine, so the check is bit-exact (as nccl-tests), except `avg` on floats, whose final
//! division may round differently from one implementation to another.

use half::{bf16, f16};
use serde::Serialize;

/// The element types, named as nccl-tests prints them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F32,
    F16,
    Bf16,
    F64,
    I32,
}

impl DType {
    #[cfg(test)]
    pub(crate) const ALL: [DType; 5] =
        [DType::F32, DType::F16, DType::Bf16, DType::F64, DType::I32];

    pub(crate) fn size(self) -> usize {
        match self {
            DType::F16 | DType::Bf16 => 2,
            DType::F32 | DType::I32 => 4,
            DType::F64 => 8,
        }
    }

    /// nccl-tests' name for the type column.
    pub(crate) fn name(self) -> &'static str {
        match self {
            DType::F32 => "float",
            DType::F16 => "half",
            DType::Bf16 => "bfloat16",
            DType::F64 => "double",
            DType::I32 => "int32",
        }
    }

    fn is_float(self) -> bool {
        self != DType::I32
    }

    /// The value of one element (`bytes` is exactly one element long).
    pub(crate) fn decode(self, bytes: &[u8]) -> f64 {
        let mut b = [0u8; 8];
        b[..bytes.len().min(8)].copy_from_slice(&bytes[..bytes.len().min(8)]);
        match self {
            DType::F32 => f64::from(f32::from_ne_bytes([b[0], b[1], b[2], b[3]])),
            DType::F16 => f16::from_ne_bytes([b[0], b[1]]).to_f64(),
            DType::Bf16 => bf16::from_ne_bytes([b[0], b[1]]).to_f64(),
            DType::F64 => f64::from_ne_bytes(b),
            DType::I32 => f64::from(i32::from_ne_bytes([b[0], b[1], b[2], b[3]])),
        }
    }

    /// Writes `value` rounded to this type into `out` (exactly one element long).
    pub(crate) fn encode(self, value: f64, out: &mut [u8]) {
        match self {
            DType::F32 => out.copy_from_slice(&(value as f32).to_ne_bytes()),
            DType::F16 => out.copy_from_slice(&f16::from_f64(value).to_ne_bytes()),
            DType::Bf16 => out.copy_from_slice(&bf16::from_f64(value).to_ne_bytes()),
            DType::F64 => out.copy_from_slice(&value.to_ne_bytes()),
            DType::I32 => out.copy_from_slice(&(value as i32).to_ne_bytes()),
        }
    }
}

/// The reduction operations, named as nccl-tests prints them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Sum,
    Prod,
    Min,
    Max,
    Avg,
}

impl Op {
    #[cfg(test)]
    pub(crate) const ALL: [Op; 5] = [Op::Sum, Op::Prod, Op::Min, Op::Max, Op::Avg];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Op::Sum => "sum",
            Op::Prod => "prod",
            Op::Min => "min",
            Op::Max => "max",
            Op::Avg => "avg",
        }
    }
}

/// The value rank `rank` of `ranks` contributes at element `index`.
pub(crate) fn input_value(op: Op, rank: usize, ranks: usize, index: usize) -> f64 {
    match op {
        // Partial sums stay within ±2·ranks: exact in bf16 up to 128 ranks, f16 up to 1024.
        Op::Sum | Op::Avg => ((index + 2 * rank) % 5) as f64 - 2.0,
        // Exactly one rank contributes 2, some contribute -1: every partial product is ±1 or ±2.
        Op::Prod => {
            if index % ranks.max(1) == rank {
                2.0
            } else if (index / ranks.max(1) + rank).is_multiple_of(7) {
                -1.0
            } else {
                1.0
            }
        }
        Op::Min | Op::Max => ((index * 13 + rank * 7) % 17) as f64 - 8.0,
    }
}

/// The exact reduced value at `index`, before rounding to the element type.
pub(crate) fn expected_value(op: Op, dtype: DType, ranks: usize, index: usize) -> f64 {
    let values = (0..ranks).map(|r| input_value(op, r, ranks, index));
    match op {
        Op::Sum => values.sum(),
        Op::Prod => values.product(),
        Op::Min => values.fold(f64::INFINITY, f64::min),
        Op::Max => values.fold(f64::NEG_INFINITY, f64::max),
        Op::Avg => {
            let sum: f64 = values.sum();
            if dtype.is_float() {
                sum / ranks as f64
            } else {
                // Integer average truncates toward zero, as C's division (and NCCL) does.
                (sum / ranks as f64).trunc()
            }
        }
    }
}

/// Fills `out` (a whole number of elements) with this rank's input.
pub(crate) fn fill_input(dtype: DType, op: Op, rank: usize, ranks: usize, out: &mut [u8]) {
    for (index, element) in out.chunks_exact_mut(dtype.size()).enumerate() {
        dtype.encode(input_value(op, rank, ranks, index), element);
    }
}

/// How many elements of `result` differ from the exact answer.
pub(crate) fn count_wrong(dtype: DType, op: Op, ranks: usize, result: &[u8]) -> u64 {
    count_wrong_from(dtype, op, ranks, 0, result)
}

/// [`count_wrong`] for a part of the reduced whole that starts at element `first`.
pub(crate) fn count_wrong_from(
    dtype: DType,
    op: Op,
    ranks: usize,
    first: usize,
    result: &[u8],
) -> u64 {
    let mut expected = [0u8; 8];
    let size = dtype.size();
    let mut wrong = 0;
    for (index, element) in result.chunks_exact(size).enumerate() {
        let index = first + index;
        let exact = expected_value(op, dtype, ranks, index);
        let ok = if op == Op::Avg && dtype.is_float() {
            let got = dtype.decode(element);
            (got - exact).abs() <= avg_tolerance(dtype) * exact.abs().max(1.0)
        } else {
            dtype.encode(exact, &mut expected[..size]);
            dtype.decode(element) == dtype.decode(&expected[..size])
        };
        if !ok {
            wrong += 1;
        }
    }
    wrong
}

/// Two units in the last place of the type, relative: the room `avg`'s division leaves.
fn avg_tolerance(dtype: DType) -> f64 {
    let mantissa_bits = match dtype {
        DType::F16 => 10,
        DType::Bf16 => 7,
        DType::F32 => 23,
        DType::F64 => 52,
        DType::I32 => 0,
    };
    2.0 * (2f64).powi(-mantissa_bits)
}

/// `acc[i] = acc[i] ∘ incoming[i]`, element by element (both the same length). For `avg`
/// this sums; [`finish_avg`] divides once every rank is in.
pub(crate) fn reduce(dtype: DType, op: Op, acc: &mut [u8], incoming: &[u8]) {
    match dtype {
        DType::F32 => reduce_typed::<f32>(op, acc, None, incoming),
        DType::F64 => reduce_typed::<f64>(op, acc, None, incoming),
        DType::I32 => reduce_typed::<i32>(op, acc, None, incoming),
        DType::F16 => reduce_typed::<f16>(op, acc, None, incoming),
        DType::Bf16 => reduce_typed::<bf16>(op, acc, None, incoming),
    }
}

/// `out[i] = local[i] ∘ incoming[i]`: the out-of-place reduction, one pass over memory.
pub(crate) fn reduce_from(dtype: DType, op: Op, out: &mut [u8], local: &[u8], incoming: &[u8]) {
    match dtype {
        DType::F32 => reduce_typed::<f32>(op, out, Some(local), incoming),
        DType::F64 => reduce_typed::<f64>(op, out, Some(local), incoming),
        DType::I32 => reduce_typed::<i32>(op, out, Some(local), incoming),
        DType::F16 => reduce_typed::<f16>(op, out, Some(local), incoming),
        DType::Bf16 => reduce_typed::<bf16>(op, out, Some(local), incoming),
    }
}

/// An element type the CPU reduces. Half types compute in f32 and round once, as GPUs do.
trait Element: Copy {
    const SIZE: usize;
    fn load(bytes: &[u8]) -> Self;
    fn store(self, bytes: &mut [u8]);
    fn add(self, other: Self) -> Self;
    fn mul(self, other: Self) -> Self;
    fn min(self, other: Self) -> Self;
    fn max(self, other: Self) -> Self;
}

/// Implements [`Element`] for `$t` ($n bytes) with each operation's function; `half $t`
/// computes in f32 and rounds once.
macro_rules! element {
    (half $t:ty) => {
        element!(
            $t,
            2,
            add: |a: $t, b: $t| <$t>::from_f32(a.to_f32() + b.to_f32()),
            mul: |a: $t, b: $t| <$t>::from_f32(a.to_f32() * b.to_f32()),
            min: |a: $t, b: $t| <$t>::from_f32(fmin(a.to_f32(), b.to_f32())),
            max: |a: $t, b: $t| <$t>::from_f32(fmax(a.to_f32(), b.to_f32())),
        );
    };
    ($t:ty, $n:expr, $($op:ident: $f:expr),* $(,)?) => {
        impl Element for $t {
            const SIZE: usize = $n;
            #[inline(always)]
            fn load(bytes: &[u8]) -> Self {
                let mut b = [0u8; $n];
                b.copy_from_slice(bytes);
                <$t>::from_ne_bytes(b)
            }
            #[inline(always)]
            fn store(self, bytes: &mut [u8]) {
                bytes.copy_from_slice(&self.to_ne_bytes());
            }
            $(
                #[inline(always)]
                fn $op(self, o: Self) -> Self {
                    ($f)(self, o)
                }
            )*
        }
    };
}

fn fmin<T: PartialOrd>(a: T, b: T) -> T {
    if b < a { b } else { a }
}

fn fmax<T: PartialOrd>(a: T, b: T) -> T {
    if b > a { b } else { a }
}

element!(f32, 4, add: |a: f32, b| a + b, mul: |a: f32, b| a * b, min: fmin, max: fmax);
element!(f64, 8, add: |a: f64, b| a + b, mul: |a: f64, b| a * b, min: fmin, max: fmax);
element!(i32, 4, add: i32::wrapping_add, mul: i32::wrapping_mul, min: Ord::min, max: Ord::max);
element!(half f16);
element!(half bf16);

/// Picks the operation once, outside the loop, so each loop is one monomorphic kernel the
/// compiler can vectorise.
fn reduce_typed<T: Element>(op: Op, out: &mut [u8], local: Option<&[u8]>, incoming: &[u8]) {
    match op {
        Op::Sum | Op::Avg => apply::<T>(out, local, incoming, T::add),
        Op::Prod => apply::<T>(out, local, incoming, T::mul),
        Op::Min => apply::<T>(out, local, incoming, T::min),
        Op::Max => apply::<T>(out, local, incoming, T::max),
    }
}

#[inline(always)]
fn apply<T: Element>(out: &mut [u8], local: Option<&[u8]>, incoming: &[u8], f: impl Fn(T, T) -> T) {
    let n = T::SIZE;
    match local {
        Some(local) => {
            for ((o, l), i) in out
                .chunks_exact_mut(n)
                .zip(local.chunks_exact(n))
                .zip(incoming.chunks_exact(n))
            {
                f(T::load(l), T::load(i)).store(o);
            }
        }
        None => {
            for (o, i) in out.chunks_exact_mut(n).zip(incoming.chunks_exact(n)) {
                let v = f(T::load(o), T::load(i));
                v.store(o);
            }
        }
    }
}

/// Divides every element by `ranks`: the last step of `avg`.
pub(crate) fn finish_avg(dtype: DType, ranks: usize, data: &mut [u8]) {
    let n = ranks.max(1);
    let size = dtype.size();
    for element in data.chunks_exact_mut(size) {
        match dtype {
            DType::I32 => {
                let v = i32::from_ne_bytes([element[0], element[1], element[2], element[3]]);
                element.copy_from_slice(&(v / n as i32).to_ne_bytes());
            }
            DType::F32 => {
                let v = f32::from_ne_bytes([element[0], element[1], element[2], element[3]]);
                element.copy_from_slice(&(v / n as f32).to_ne_bytes());
            }
            _ => {
                let v = dtype.decode(element);
                dtype.encode(v / n as f64, element);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reduces every rank's input in the given order, as a ring would, and checks it.
    fn reduce_in_order(dtype: DType, op: Op, ranks: usize, order: &[usize], count: usize) -> u64 {
        let size = dtype.size();
        let input = |r| {
            let mut v = vec![0u8; count * size];
            fill_input(dtype, op, r, ranks, &mut v);
            v
        };
        let mut acc = input(order[0]);
        for &r in &order[1..] {
            reduce(dtype, op, &mut acc, &input(r));
        }
        if op == Op::Avg {
            finish_avg(dtype, ranks, &mut acc);
        }
        count_wrong(dtype, op, ranks, &acc)
    }

    #[test]
    fn every_type_and_op_reduces_exactly_in_any_order() {
        for dtype in DType::ALL {
            for op in Op::ALL {
                for ranks in [1, 2, 3, 7] {
                    let forward: Vec<usize> = (0..ranks).collect();
                    let backward: Vec<usize> = (0..ranks).rev().collect();
                    assert_eq!(
                        reduce_in_order(dtype, op, ranks, &forward, 257),
                        0,
                        "{dtype:?} {op:?} {ranks}"
                    );
                    assert_eq!(
                        reduce_in_order(dtype, op, ranks, &backward, 257),
                        0,
                        "{dtype:?} {op:?} {ranks}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_missing_rank_or_a_flipped_bit_is_counted() {
        for dtype in DType::ALL {
            for op in Op::ALL {
                let mut acc = vec![0u8; 64 * dtype.size()];
                fill_input(dtype, op, 0, 1, &mut acc);
                // One rank's input is not the answer for three ranks.
                assert!(count_wrong(dtype, op, 3, &acc) > 0, "{dtype:?} {op:?}");
                // A single changed element is exactly one wrong element.
                let mut exact = acc.clone();
                for (i, e) in exact.chunks_exact_mut(dtype.size()).enumerate() {
                    dtype.encode(expected_value(op, dtype, 1, i), e);
                }
                assert_eq!(count_wrong(dtype, op, 1, &exact), 0);
                dtype.encode(1000.0, &mut exact[..dtype.size()]);
                assert_eq!(count_wrong(dtype, op, 1, &exact), 1, "{dtype:?} {op:?}");
            }
        }
    }

    #[test]
    fn out_of_place_reduction_matches_in_place() {
        for dtype in DType::ALL {
            for op in Op::ALL {
                let mut a = vec![0u8; 33 * dtype.size()];
                let mut b = a.clone();
                fill_input(dtype, op, 0, 2, &mut a);
                fill_input(dtype, op, 1, 2, &mut b);
                let mut out = vec![0u8; a.len()];
                reduce_from(dtype, op, &mut out, &a, &b);
                reduce(dtype, op, &mut a, &b);
                assert_eq!(out, a, "{dtype:?} {op:?}");
            }
        }
    }

    #[test]
    fn integer_average_truncates() {
        // Inputs -2 and 1 (index 0, ranks 0 and 1... ) → any sum; check against C semantics.
        let mut data = Vec::new();
        for v in [-3i32, 3, 7, -7] {
            data.extend_from_slice(&v.to_ne_bytes());
        }
        finish_avg(DType::I32, 2, &mut data);
        let got: Vec<i32> = data
            .chunks_exact(4)
            .map(|c| i32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(got, [-1, 1, 3, -3]);
    }
}
