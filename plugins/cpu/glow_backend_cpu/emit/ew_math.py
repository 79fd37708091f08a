"""Math functions for element-wise code: a vectorized ``exp`` and libm calls lane by lane.

``exp`` on float32 is a vectorized polynomial (Cephes' ``expf``: range
reduction by ``n = round(x / ln 2)`` with a two-part ``ln 2``, a degree-6
polynomial, then ``2^n`` built in the exponent bits in two halves so results
down to the denormals are right); it stays within about one ulp of libm.
Everything else (and every float64 function) calls the C library's function
for each lane (:func:`libm_call`), which is what the interpreter's numpy
computes to within a few ulps.
"""

from __future__ import annotations

from llvmlite import ir

from glow_backend_cpu.helpers import (
    F32,
    F64,
    I32,
    call_intrinsic,
    const_like,
    i32,
    intrinsic,
    lanes_of,
    scalar_type,
    vec_type,
)


def libm_call(b: ir.IRBuilder, name: str, args: list[ir.Value]) -> ir.Value:
    """``name(args...)`` of the C math library, applied lane by lane to vectors.

    ``name`` is the double-precision name (``exp``); float32 operands call the
    ``f``-suffixed function.
    """
    st = scalar_type(args[0].type)
    cname = name + ("f" if isinstance(st, ir.FloatType) else "")
    fn = intrinsic(b.module, cname, st, [st] * len(args))
    lanes = lanes_of(args[0].type)
    if lanes == 1:
        return b.call(fn, args)
    out = ir.Constant(args[0].type, ir.Undefined)
    for j in range(lanes):
        parts = [b.extract_element(a, i32(j)) for a in args]
        out = b.insert_element(out, b.call(fn, parts), i32(j))
    return out


def libm_call_f64(b: ir.IRBuilder, name: str, args: list[ir.Value]) -> ir.Value:
    """Compute ``name`` in float64 and round back to the operands' type (as the interpreter's Erf)."""
    st = scalar_type(args[0].type)
    if isinstance(st, ir.DoubleType):
        return libm_call(b, name, args)
    wide = [b.fpext(a, vec_type(F64, lanes_of(a.type))) for a in args]
    return b.fptrunc(libm_call(b, name, wide), args[0].type)


def fmul_add(b: ir.IRBuilder, x: ir.Value, y: ir.Value, z: ir.Value) -> ir.Value:
    """``x * y + z`` with one rounding (llvm.fma)."""
    return call_intrinsic(b, "fma", [x, y, z])


def exp_f32(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """Vectorized float32 ``exp`` (scalar or vector operand)."""
    t = x.type
    lanes = lanes_of(t)
    it = vec_type(I32, lanes)

    def c(v: float) -> ir.Constant:
        return const_like(t, v)

    n = call_intrinsic(b, "roundeven", [b.fmul(x, c(1.44269504088896341))])
    r = fmul_add(b, n, c(-0.693359375), x)
    r = fmul_add(b, n, c(2.12194440e-4), r)
    p = c(1.9875691500e-4)
    for coef in (1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1):
        p = fmul_add(b, p, r, c(coef))
    r2 = b.fmul(r, r)
    y = fmul_add(b, p, r2, b.fadd(r, c(1.0)))
    # 2^n in two halves: n in [-150, 128] after clamping, each half a normal power of two
    nc = b.select(b.fcmp_ordered("<", n, c(-150.0)), c(-150.0), n)
    nc = b.select(b.fcmp_ordered(">", nc, c(128.0)), c(128.0), nc)
    ni = b.fptosi(nc, it)
    n1 = b.ashr(ni, const_like(it, 1))
    n2 = b.sub(ni, n1)

    def pow2(k: ir.Value) -> ir.Value:
        return b.bitcast(b.shl(b.add(k, const_like(it, 127)), const_like(it, 23)), t)

    # below -103.97 the result is 0: the first factor is 0 there, so no product underflows into the
    # denormals (each such product costs a microcode assist of ~100 cycles on x86; a masked score of -1e4
    # in every softmax row made attention 2.6x slower)
    under = b.fcmp_ordered("<", x, c(-103.97208404541016))
    y = b.fmul(b.fmul(y, b.select(under, c(0.0), pow2(n1))), pow2(n2))
    y = b.select(b.fcmp_ordered(">", x, c(88.72283935546875)), c(float("inf")), y)
    y = b.select(under, c(0.0), y)
    return b.select(b.fcmp_unordered("uno", x, x), x, y)


def exp(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    if isinstance(scalar_type(x.type), ir.FloatType):
        return exp_f32(b, x)
    return libm_call(b, "exp", [x])


def is_f32(v: ir.Value) -> bool:
    return scalar_type(v.type) == F32


def sigmoid_f32(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """Vectorized float32 logistic, overflow-free: ``1 / (1 + e)`` or ``e / (1 + e)`` with ``e = exp(-|x|)``
    (the same as the Sigmoid emitter)."""
    e = exp_f32(b, b.fneg(call_intrinsic(b, "fabs", [x])))
    one = const_like(x.type, 1.0)
    den = b.fadd(one, e)
    return b.select(b.fcmp_ordered(">=", x, const_like(x.type, 0.0)), b.fdiv(one, den), b.fdiv(e, den))


#: Cephes' ``logf`` polynomial: log(1 + m) = m - m^2 / 2 + m^3 * P(m) on sqrt(1/2) - 1 <= m < sqrt(2) - 1
LOG_P = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
         -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1)


def log_f32(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """Vectorized float32 natural ``log`` (Cephes' ``logf``): x = 2^e * (1 + m) from the exponent bits
    (denormals scaled by 2^23 first), a polynomial in m, e * ln 2 in two parts; within an ulp or two of
    libm; log(0) = -inf, a negative x gives NaN, +inf and NaN stay."""
    t = x.type
    it = vec_type(I32, lanes_of(t))

    def c(v: float) -> ir.Constant:
        return const_like(t, v)

    def ci(v: int) -> ir.Constant:
        return const_like(it, v)

    tiny = b.fcmp_ordered("<", x, c(1.1754943508222875e-38))
    xs = b.select(tiny, b.fmul(x, c(8388608.0)), x)
    bits = b.bitcast(xs, it)
    e = b.sub(b.and_(b.lshr(bits, ci(23)), ci(0xFF)), b.select(tiny, ci(126 + 23), ci(126)))
    m = b.bitcast(b.or_(b.and_(bits, ci(0x007FFFFF)), ci(0x3F000000)), t)  # in [0.5, 1)
    low = b.fcmp_ordered("<", m, c(0.707106781186547524))
    e = b.sub(e, b.zext(low, it))
    m = b.fsub(b.select(low, b.fadd(m, m), m), c(1.0))
    z = b.fmul(m, m)
    p = c(LOG_P[0])
    for coef in LOG_P[1:]:
        p = fmul_add(b, p, m, c(coef))
    fe = b.sitofp(e, t)
    y = fmul_add(b, c(-2.12194440e-4), fe, b.fmul(m, b.fmul(z, p)))
    y = fmul_add(b, c(-0.5), z, y)
    r = fmul_add(b, c(0.693359375), fe, b.fadd(m, y))
    r = b.select(b.fcmp_ordered("==", x, c(0.0)), c(float("-inf")), r)
    r = b.select(b.fcmp_ordered("<", x, c(0.0)), c(float("nan")), r)
    return b.select(b.fcmp_unordered("ueq", x, c(float("inf"))), x, r)  # NaN and +inf stay


def tanh_f32(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """Vectorized float32 ``tanh`` (Cephes' ``tanhf``): an odd polynomial below |x| = 0.625, else
    ``1 - 2 / (exp(2|x|) + 1)`` with the sign of x; within a few ulps of libm, NaN stays NaN."""
    t = x.type

    def c(v: float) -> ir.Constant:
        return const_like(t, v)

    ax = call_intrinsic(b, "fabs", [x])
    big = b.fsub(c(1.0), b.fdiv(c(2.0), b.fadd(exp_f32(b, b.fmul(ax, c(2.0))), c(1.0))))
    z = b.fmul(x, x)
    p = c(-5.70498872745e-3)
    for coef in (2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1, -3.33332819422e-1):
        p = fmul_add(b, p, z, c(coef))
    small = fmul_add(b, b.fmul(p, z), x, x)
    # the sign of x on both branches (tanh(-0) is -0: the polynomial's fma gave +0)
    return call_intrinsic(b, "copysign", [b.select(b.fcmp_ordered("<", ax, c(0.625)), small, big), x])


#: erf(x) / x as a polynomial in x^2 on |x| < 1, and x * erfc(x) * exp(x^2) as a polynomial in 1 / x on
#: 1 <= |x| < 4: least-squares fits (numpy ``polyfit``, degrees 6 and 10) to Python's ``math.erf`` /
#: ``math.erfc`` on 4000 Chebyshev points of each interval, rounded to float32. Evaluated in float32 they
#: stay within 2.2e-7 relative (two ulps) of the correctly rounded erf; erfc(4) is below half an ulp of 1.
ERF_SMALL = (1.1283791065216064, -0.3761262595653534, 0.11283597350120544, -0.02685432881116867,
             0.005189312621951103, -0.0008018859080038965, 7.882500358391553e-05)
ERF_LARGE = (0.5643100738525391, -0.00294695096090436, -0.24997766315937042, -0.2044740617275238,
             1.254138469696045, -2.1728217601776123, 2.2522597312927246, -1.5344014167785645,
             0.6773870587348938, -0.17656144499778748, 0.0206716600805521)


def _horner(b: ir.IRBuilder, coefs: tuple[float, ...], t: ir.Value) -> ir.Value:
    p = const_like(t.type, coefs[-1])
    for c in coefs[-2::-1]:
        p = fmul_add(b, p, t, const_like(t.type, c))
    return p


def erf_f32(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """Vectorized float32 ``erf`` (one pass, no libm calls): ``x * P(x^2)`` below |x| = 1, else
    ``sign(x) * (1 - exp(-x^2) * Q(1/|x|) / |x|)``, 1 from |x| = 4 on; NaN stays NaN."""
    t = x.type

    def c(v: float) -> ir.Constant:
        return const_like(t, v)

    ax = call_intrinsic(b, "fabs", [x])
    z = b.fmul(x, x)
    small = b.fmul(x, _horner(b, ERF_SMALL, z))
    u = b.fdiv(c(1.0), b.select(b.fcmp_ordered("<", ax, c(1.0)), c(1.0), ax))  # no division by 0 in the lanes
    erfc = b.fmul(b.fmul(exp_f32(b, b.fneg(z)), _horner(b, ERF_LARGE, u)), u)
    big = call_intrinsic(b, "copysign", [b.fsub(c(1.0), erfc), x])
    big = b.select(b.fcmp_ordered(">=", ax, c(4.0)), call_intrinsic(b, "copysign", [c(1.0), x]), big)
    res = b.select(b.fcmp_ordered("<", ax, c(1.0)), small, big)
    return b.select(b.fcmp_unordered("uno", x, x), x, res)
