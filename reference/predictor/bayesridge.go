package predictor

import (
	"errors"
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"
)

// Hyper-priors of the Gamma distributions over the noise precision (alpha) and the weight
// precision (lambda): the same non-informative values scikit-learn's BayesianRidge uses, which is
// what upstream's training_server.py fits.
const (
	brAlpha1  = 1e-6
	brAlpha2  = 1e-6
	brLambda1 = 1e-6
	brLambda2 = 1e-6
	brMaxIter = 300
	brTol     = 1e-6
)

// linearFit is a fitted Bayesian ridge regression in the original (unscaled) feature space:
// ŷ = Intercept + Σ Coef[i]·x[i]. Predictive variance for x is 1/Alpha + zᵀ·Sigma·z with z the
// standardised x (z[i] = (x[i] − mean[i]) / scale[i]).
type linearFit struct {
	Intercept float64
	Coef      []float64
	// Alpha is the estimated noise precision (1/ms²); Lambda the weight precision.
	Alpha, Lambda float64
	mean, scale   []float64
	sigma         []float64 // d×d row-major posterior covariance in standardised space
	// N is the number of samples fitted; Iter the evidence-maximisation iterations run.
	N, Iter int
}

// suffStats accumulates what a Bayesian ridge fit needs in one pass: n, Σx, Σxxᵀ, Σxy, Σy, Σy².
type suffStats struct {
	d       int
	n       float64
	sx      []float64
	sxx     []float64 // d×d row-major
	sxy     []float64
	sy, syy float64
}

func newSuffStats(d int) *suffStats {
	return &suffStats{d: d, sx: make([]float64, d), sxx: make([]float64, d*d), sxy: make([]float64, d)}
}

func (s *suffStats) add(x []float64, y float64) {
	s.n++
	s.sy += y
	s.syy += y * y
	for i, xi := range x {
		s.sx[i] += xi
		s.sxy[i] += xi * y
		row := s.sxx[i*s.d:]
		for j := i; j < s.d; j++ {
			row[j] += xi * x[j]
		}
	}
}

// errTooFewSamples is returned by fit when n < 2.
var errTooFewSamples = errors.New("bayesian ridge: need at least 2 samples")

// fit runs evidence maximisation (MacKay's fixed-point updates, as in scikit-learn's
// BayesianRidge) on standardised features and centred targets, from the sufficient statistics
// only. Constant features get a zero coefficient.
func (s *suffStats) fit() (*linearFit, error) {
	if s.n < 2 {
		return nil, errTooFewSamples
	}
	d, n := s.d, s.n
	mean := make([]float64, d)
	scale := make([]float64, d)
	for i := range d {
		mean[i] = s.sx[i] / n
		v := s.sxx[i*d+i]/n - mean[i]*mean[i]
		if v > 1e-12*math.Max(1, mean[i]*mean[i]) {
			scale[i] = math.Sqrt(v)
		}
	}
	ymean := s.sy / n
	// Standardised Gram matrix G = ZᵀZ and b = Zᵀ(y − ȳ); constant columns stay zero.
	g := mat.NewSymDense(d, nil)
	b := make([]float64, d)
	for i := range d {
		if scale[i] == 0 {
			continue
		}
		b[i] = (s.sxy[i] - n*mean[i]*ymean) / scale[i]
		for j := i; j < d; j++ {
			if scale[j] == 0 {
				continue
			}
			cov := s.sxx[i*d+j] - n*mean[i]*mean[j]
			g.SetSym(i, j, cov/(scale[i]*scale[j]))
		}
	}
	yy := s.syy - n*ymean*ymean // Σ(y−ȳ)²
	var eig mat.EigenSym
	if !eig.Factorize(g, true) {
		return nil, errors.New("bayesian ridge: eigendecomposition failed")
	}
	ev := eig.Values(nil)
	for i := range ev {
		if ev[i] < 0 {
			ev[i] = 0
		}
	}
	var V mat.Dense
	eig.VectorsTo(&V)
	// Project b onto the eigenvectors once: coef = V·diag(1/(ev+λ/α))·Vᵀb.
	vb := make([]float64, d)
	for k := range d {
		for i := range d {
			vb[k] += V.At(i, k) * b[i]
		}
	}
	yVar := yy / n
	alpha := 1.0
	if yVar > 0 {
		alpha = 1 / (yVar + 1e-12)
	}
	lambda := 1.0
	coef := make([]float64, d)
	prev := make([]float64, d)
	iter := 0
	for iter = 1; iter <= brMaxIter; iter++ {
		copy(prev, coef)
		for i := range coef {
			coef[i] = 0
		}
		for k := range d {
			w := vb[k] / (ev[k] + lambda/alpha)
			for i := range d {
				coef[i] += V.At(i, k) * w
			}
		}
		// rss = yy − 2·coefᵀb + coefᵀGcoef
		cb, cgc := 0.0, 0.0
		for i := range d {
			cb += coef[i] * b[i]
			for j := range d {
				cgc += coef[i] * g.At(i, j) * coef[j]
			}
		}
		rss := math.Max(yy-2*cb+cgc, 0)
		gamma := 0.0
		for k := range d {
			gamma += alpha * ev[k] / (lambda + alpha*ev[k])
		}
		norm2 := 0.0
		for _, c := range coef {
			norm2 += c * c
		}
		lambda = (gamma + 2*brLambda1) / (norm2 + 2*brLambda2)
		alpha = (n - gamma + 2*brAlpha1) / (rss + 2*brAlpha2)
		delta := 0.0
		for i := range d {
			delta += math.Abs(coef[i] - prev[i])
		}
		if iter > 1 && delta < brTol {
			break
		}
	}
	if math.IsNaN(alpha) || math.IsNaN(lambda) || math.IsInf(alpha, 0) {
		return nil, fmt.Errorf("bayesian ridge: did not converge (alpha=%v lambda=%v)", alpha, lambda)
	}
	// Final coefficients with the final hyper-parameters, and the posterior covariance
	// Σ = V·diag(1/(α·ev+λ))·Vᵀ in standardised space.
	for i := range coef {
		coef[i] = 0
	}
	sigma := mat.NewSymDense(d, nil)
	for k := range d {
		w := vb[k] / (ev[k] + lambda/alpha)
		sv := 1 / (alpha*ev[k] + lambda)
		for i := range d {
			coef[i] += V.At(i, k) * w
			for j := i; j < d; j++ {
				sigma.SetSym(i, j, sigma.At(i, j)+V.At(i, k)*sv*V.At(j, k))
			}
		}
	}
	f := &linearFit{Coef: make([]float64, d), Alpha: alpha, Lambda: lambda, mean: mean, scale: scale, sigma: make([]float64, d*d), N: int(n), Iter: iter}
	for i := range d {
		for j := range d {
			f.sigma[i*d+j] = sigma.At(i, j)
		}
	}
	f.Intercept = ymean
	for i := range d {
		if scale[i] == 0 {
			continue
		}
		f.Coef[i] = coef[i] / scale[i]
		f.Intercept -= f.Coef[i] * mean[i]
	}
	return f, nil
}

// predict returns the posterior mean and the predictive standard deviation for x.
func (f *linearFit) predict(x []float64) (mean, std float64) {
	mean = f.Intercept
	for i, c := range f.Coef {
		mean += c * x[i]
	}
	d := len(f.Coef)
	var zbuf [16]float64
	z := zbuf[:0]
	if d > len(zbuf) {
		z = make([]float64, 0, d)
	}
	for i := range d {
		if f.scale[i] == 0 {
			z = append(z, 0)
			continue
		}
		z = append(z, (x[i]-f.mean[i])/f.scale[i])
	}
	v := 1 / f.Alpha
	for i := range d {
		if z[i] == 0 {
			continue
		}
		row := f.sigma[i*d : (i+1)*d]
		acc := 0.0
		for j, zj := range z {
			acc += row[j] * zj
		}
		v += z[i] * acc
	}
	return mean, math.Sqrt(math.Max(v, 0))
}
