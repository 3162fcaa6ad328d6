package symbolizeprocessor

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"

	"github.com/profsym/profsym/gen/profsym/symbolizer/v1/symbolizerv1connect"
	"github.com/profsym/profsym/pkg/affinity"
	"github.com/profsym/profsym/pkg/otlpprofiles"
	"github.com/profsym/profsym/pkg/otlpprofiles/symbolize"
)

type symbolizeProcessor struct {
	cfg    *Config
	logger *zap.Logger
	tel    *telemetry
	sym    *symbolize.Symbolizer
	hc     *http.Client
	router *affinity.Router
}

func newProcessor(cfg *Config, set component.TelemetrySettings) (*symbolizeProcessor, error) {
	tel, err := newTelemetry(set)
	if err != nil {
		return nil, fmt.Errorf("symbolize processor telemetry: %w", err)
	}
	return &symbolizeProcessor{cfg: cfg, logger: set.Logger, tel: tel}, nil
}

// start builds the symbolizer client: TLS files and the token file are read here, so a
// rotated certificate or token takes effect with the Collector's next start.
func (p *symbolizeProcessor) start(ctx context.Context, _ component.Host) error {
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		MaxIdleConns:        64,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   true,
	}
	if strings.HasPrefix(p.cfg.Endpoint, "https://") {
		tlsCfg, err := p.cfg.TLS.LoadTLSConfig(ctx)
		if err != nil {
			return fmt.Errorf("symbolize processor tls: %w", err)
		}
		tr.TLSClientConfig = tlsCfg
	}
	token, err := p.cfg.token()
	if err != nil {
		return fmt.Errorf("symbolize processor: %w", err)
	}
	p.hc = &http.Client{Transport: tr}
	client := symbolize.NewClient(p.hc, p.cfg.Endpoint, token)
	if a := p.cfg.Affinity; a.Enabled {
		u, err := url.Parse(p.cfg.Endpoint)
		if err != nil {
			return fmt.Errorf("symbolize processor endpoint: %w", err)
		}
		if tr.TLSClientConfig != nil && tr.TLSClientConfig.ServerName == "" {
			// Replicas are dialed by address; their certificate names the Service.
			tr.TLSClientConfig.ServerName = u.Hostname()
		}
		p.router, err = affinity.New(affinity.Config{
			Scheme: u.Scheme, DNS: a.DNS, Static: a.Endpoints, Refresh: a.RefreshInterval,
			AttemptTimeout: a.AttemptTimeout, BalanceFactor: a.BalanceFactor, EjectFor: a.EjectFor, GiveUpAfter: a.GiveUpAfter,
			NewClient: func(base string) symbolizerv1connect.SymbolizerServiceClient {
				return symbolize.NewClient(p.hc, base, token)
			},
			Logger: slog.New(zapslog.NewHandler(p.logger.Core())),
		})
		if err != nil {
			return fmt.Errorf("symbolize processor: %w", err)
		}
		p.router.Start()
		client = p.router
	}
	cacheEntries := p.cfg.CacheEntries
	if cacheEntries == 0 {
		cacheEntries = -1 // symbolize.Config reads 0 as "default"; here 0 turns the cache off
	}
	p.sym = symbolize.New(symbolize.Config{
		Client:         client,
		Timeout:        p.cfg.Deadline,
		CallTimeout:    p.cfg.Timeout,
		BatchAddresses: p.cfg.BatchAddresses,
		Concurrency:    p.cfg.Concurrency,
		CacheEntries:   cacheEntries,
		FrameTypes:     p.cfg.frameTypes(),
		OnCall:         p.tel.onCall,
		Logger:         slog.New(zapslog.NewHandler(p.logger.Core())),
	})
	return nil
}

func (p *symbolizeProcessor) shutdown(context.Context) error {
	if p.router != nil {
		p.router.Close()
	}
	if p.hc != nil {
		p.hc.CloseIdleConnections()
	}
	return nil
}

// processProfiles symbolizes pd within the deadline and hands it on; it never fails and never
// drops: what cannot be symbolized goes on as it came.
func (p *symbolizeProcessor) processProfiles(ctx context.Context, pd pprofile.Profiles) (pprofile.Profiles, error) {
	// The Collector's OTLP/gRPC receiver leaves resource and scope attributes that arrived as
	// string-table references unresolved, and compaction renumbers the string table they
	// point into. pdata does not check indices and panics on a bad one: a batch that fails
	// either check is not read further, only passed on.
	if err := otlpprofiles.ResolveReferences(pd); err != nil {
		p.tel.invalid.Add(ctx, 1)
		p.logger.Warn("profiles passed on unsymbolized: invalid attribute reference", zap.Error(err))
		return pd, nil
	}
	if err := otlpprofiles.Validate(pd); err != nil {
		p.tel.invalid.Add(ctx, 1)
		p.logger.Warn("profiles passed on unsymbolized: invalid index", zap.Error(err))
		return pd, nil
	}
	rep := p.sym.Process(ctx, pd)
	p.tel.record(ctx, rep)
	if n := rep.Unresolved[symbolize.ReasonDeadline] + rep.Unresolved[symbolize.ReasonSymbolizerError]; n > 0 {
		p.logger.Debug("frames passed on unsymbolized", zap.Int("frames", n), zap.Any("reasons", rep.Unresolved))
	}
	return pd, nil
}
