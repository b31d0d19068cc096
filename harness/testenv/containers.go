package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
	"golang.org/x/sync/errgroup"
)

// The images of WALHOUSE_SERVICES=containers, pinned. They are those of
// deploy/compose.yaml (TestContainerImagesMatchCompose keeps them so), so a
// Docker host pulls one set for both.
const (
	postgresImage   = "postgres:17.5-bookworm"
	kafkaImage      = "apache/kafka:3.9.1"
	clickhouseImage = "clickhouse/clickhouse-server:25.3.6.56"
	valkeyImage     = "valkey/valkey:8.1.1-bookworm"
)

// The ClickHouse server's user: the image lets its default user in from
// loopback only, so the tests log in as a user of their own, with the
// password the local Kafka and Redis listeners use too.
const (
	clickhouseUser     = "walhouse"
	clickhousePassword = "walhouse-local"
)

// containerLabel marks every container this package starts, for finding
// leftovers when the reaper is off: docker ps -a --filter label=walhouse.testenv.
const containerLabel = "walhouse.testenv"

// ErrNoEngine is the error of StartContainers (and so of Require under
// WALHOUSE_SERVICES=containers) when no container engine answers.
var ErrNoEngine = errors.New("no Docker engine")

// Containers is a running set of walhouse's services as containers:
// PostgreSQL (wal_level=logical), Kafka in KRaft mode, a ClickHouse server
// reached over the native protocol, and Valkey. It provides the services
// of Env's PG, Kafka, ClickHouse and Redis fields, not the Kafka SASL and
// TLS listeners nor the Redis TLS listener.
type Containers struct {
	env Env
	all []testcontainers.Container
}

// StartContainers starts the four services as containers, pulling their
// images if needed, and returns once each is ready. Without a container
// engine it returns an error that wraps ErrNoEngine; when a container does
// not start, it removes those that did. The caller calls Terminate when
// done; what it leaves behind (a test binary that exits) testcontainers'
// reaper removes shortly after the process ends.
func StartContainers(ctx context.Context) (*Containers, error) {
	if err := checkEngine(ctx); err != nil {
		return nil, err
	}
	var (
		c  Containers
		ep endpoints
		mu sync.Mutex // guards c.all
	)
	services := []struct {
		start func(context.Context) (testcontainers.Container, string, error)
		addr  *string
	}{{startPostgres, &ep.pg}, {startKafka, &ep.kafka}, {startClickHouse, &ep.clickhouse}, {startValkey, &ep.redis}}
	// In parallel: the set is ready as soon as its slowest member. The
	// first failure cancels the others' waits.
	g, gctx := errgroup.WithContext(ctx)
	for _, s := range services {
		g.Go(func() error {
			ctr, addr, err := s.start(gctx)
			*s.addr = addr
			if ctr != nil {
				mu.Lock()
				c.all = append(c.all, ctr)
				mu.Unlock()
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, errors.Join(fmt.Errorf("start the service containers: %w", err), c.Terminate(context.WithoutCancel(ctx)))
	}
	c.env = ep.env()
	return &c, nil
}

// Env returns the addresses of the services, as .local/env gives those of
// the local ones.
func (c *Containers) Env() Env { return c.env }

// Terminate stops and removes the containers.
func (c *Containers) Terminate(ctx context.Context) error {
	var errs []error
	for _, ctr := range c.all {
		if err := ctr.Terminate(ctx); err != nil {
			errs = append(errs, fmt.Errorf("remove container %s: %w", ctr.GetContainerID(), err))
		}
	}
	return errors.Join(errs...)
}

// checkEngine returns an error wrapping ErrNoEngine when no container
// engine answers. testcontainers panics when it finds no Docker host at
// all, hence the recover.
func checkEngine(ctx context.Context) (err error) {
	noEngine := func(cause any) error {
		return fmt.Errorf("%w: %v; WALHOUSE_SERVICES=containers needs one (start Docker, or point DOCKER_HOST at one), "+
			"or unset WALHOUSE_SERVICES to use the local services (make services)", ErrNoEngine, cause)
	}
	defer func() {
		if r := recover(); r != nil {
			err = noEngine(r)
		}
	}()
	p, err := testcontainers.ProviderDefault.GetProvider()
	if err != nil {
		return noEngine(err)
	}
	if err := p.Health(ctx); err != nil { // Health closes p
		return noEngine(err)
	}
	return nil
}

// endpoints are the host:port addresses at which the containers' services
// are reached from this host.
type endpoints struct {
	pg, kafka, clickhouse, redis string
}

// env maps the endpoints to an Env with the URLs and DSNs the local
// services' .local/env has, but for ClickHouse: a native-protocol DSN to
// the server instead of the embedded engine's HTTP one.
func (ep endpoints) env() Env {
	pg := url.URL{Scheme: "postgres", User: url.User("postgres"), Host: ep.pg, Path: "/walhouse", RawQuery: "sslmode=disable"}
	ch := url.URL{Scheme: "clickhouse", User: url.UserPassword(clickhouseUser, clickhousePassword), Host: ep.clickhouse}
	return Env{PG: pg.String(), Kafka: ep.kafka, Redis: ep.redis, ClickHouse: ch.String()}
}

// hostPort returns the address at which port of ctr is reached from this
// host.
func hostPort(ctx context.Context, ctr testcontainers.Container, port string) (string, error) {
	host, err := ctr.Host(ctx)
	if err != nil {
		return "", fmt.Errorf("find the container's host: %w", err)
	}
	p, err := ctr.MappedPort(ctx, port)
	if err != nil {
		return "", fmt.Errorf("find the host port of %s: %w", port, err)
	}
	return net.JoinHostPort(host, p.Port()), nil
}

// run starts one container with the options every container here shares.
func run(ctx context.Context, image, port string, opts ...testcontainers.ContainerCustomizer) (testcontainers.Container, string, error) {
	opts = append(opts, testcontainers.WithExposedPorts(port), testcontainers.WithLabels(map[string]string{containerLabel: "1"}))
	ctr, err := testcontainers.Run(ctx, image, opts...)
	if ctr == nil { // a typed nil must not become a non-nil Container
		return nil, "", fmt.Errorf("%s: %w", image, err)
	}
	if err != nil {
		return ctr, "", fmt.Errorf("%s: %w", image, err)
	}
	addr, err := hostPort(ctx, ctr, port)
	if err != nil {
		return ctr, "", fmt.Errorf("%s: %w", image, err)
	}
	return ctr, addr, nil
}

// startPostgres starts PostgreSQL set up as deploy/local/lib/postgres.sh
// sets up the local one: database walhouse, user postgres trusted without
// a password, logical decoding, and no durability (a throwaway instance).
func startPostgres(ctx context.Context) (testcontainers.Container, string, error) {
	return run(ctx, postgresImage, "5432/tcp",
		testcontainers.WithEnv(map[string]string{"POSTGRES_DB": "walhouse", "POSTGRES_HOST_AUTH_METHOD": "trust"}),
		testcontainers.WithCmd("postgres",
			"-c", "wal_level=logical", "-c", "max_replication_slots=20", "-c", "max_wal_senders=20",
			"-c", "max_connections=200", "-c", "fsync=off", "-c", "synchronous_commit=off"),
		testcontainers.WithTmpfs(map[string]string{"/var/lib/postgresql/data": "rw"}),
		// The entrypoint starts a temporary server to initialise the
		// database, then the real one: ready is the second time.
		testcontainers.WithWaitStrategy(wait.ForLog("database system is ready to accept connections").
			WithOccurrence(2).WithStartupTimeout(2*time.Minute)),
	)
}

// The Kafka broker advertises the host port its container was given,
// which is known only once the container runs: the container waits for
// this script, which the start hook writes with that port in it.
const (
	kafkaStartScript = "/tmp/walhouse-kafka-start.sh"
	// kafkaStartScriptFormat: the advertised host:port for clients, and
	// the container's hostname for the broker's own (inter-broker) listener.
	kafkaStartScriptFormat = "export KAFKA_ADVERTISED_LISTENERS=PLAINTEXT://%s,BROKER://%s:9093\nexec /etc/kafka/docker/run\n"
)

// kafkaEnv configures the apache/kafka image as deploy/local/lib/kafka.sh
// configures the local broker: one node that is broker and controller, one
// replica of everything, no automatic topics. PLAINTEXT is for clients,
// BROKER for the broker itself (transaction markers, for one), CONTROLLER
// for KRaft.
var kafkaEnv = map[string]string{
	"CLUSTER_ID":                                     "4L6g3nShT-eMCtK--X86sw",
	"KAFKA_NODE_ID":                                  "1",
	"KAFKA_PROCESS_ROLES":                            "broker,controller",
	"KAFKA_LISTENERS":                                "PLAINTEXT://0.0.0.0:9092,BROKER://0.0.0.0:9093,CONTROLLER://0.0.0.0:9094",
	"KAFKA_LISTENER_SECURITY_PROTOCOL_MAP":           "PLAINTEXT:PLAINTEXT,BROKER:PLAINTEXT,CONTROLLER:PLAINTEXT",
	"KAFKA_INTER_BROKER_LISTENER_NAME":               "BROKER",
	"KAFKA_CONTROLLER_LISTENER_NAMES":                "CONTROLLER",
	"KAFKA_CONTROLLER_QUORUM_VOTERS":                 "1@localhost:9094",
	"KAFKA_DEFAULT_REPLICATION_FACTOR":               "1",
	"KAFKA_MIN_INSYNC_REPLICAS":                      "1",
	"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR":         "1",
	"KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS":             "6",
	"KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
	"KAFKA_TRANSACTION_STATE_LOG_MIN_ISR":            "1",
	"KAFKA_AUTO_CREATE_TOPICS_ENABLE":                "false",
	"KAFKA_NUM_PARTITIONS":                           "6",
	"KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS":         "0",
}

// startKafka starts a Kafka broker in KRaft mode.
func startKafka(ctx context.Context) (testcontainers.Container, string, error) {
	const port = "9092/tcp"
	return run(ctx, kafkaImage, port,
		testcontainers.WithEnv(kafkaEnv),
		testcontainers.WithEntrypoint("sh"),
		testcontainers.WithCmd("-c", "while [ ! -f "+kafkaStartScript+" ]; do sleep 0.1; done; exec sh "+kafkaStartScript),
		testcontainers.WithLifecycleHooks(testcontainers.ContainerLifecycleHooks{
			PostStarts: []testcontainers.ContainerHook{func(ctx context.Context, ctr testcontainers.Container) error {
				if err := wait.ForMappedPort(port).WaitUntilReady(ctx, ctr); err != nil {
					return fmt.Errorf("wait for the broker's host port: %w", err)
				}
				addr, err := hostPort(ctx, ctr, port)
				if err != nil {
					return err
				}
				info, err := ctr.Inspect(ctx)
				if err != nil {
					return fmt.Errorf("inspect the broker's container: %w", err)
				}
				script := fmt.Sprintf(kafkaStartScriptFormat, addr, info.Config.Hostname)
				if err := ctr.CopyToContainer(ctx, []byte(script), kafkaStartScript, 0o755); err != nil {
					return fmt.Errorf("write the broker's start script: %w", err)
				}
				return wait.ForLog("Kafka Server started").WithStartupTimeout(3*time.Minute).WaitUntilReady(ctx, ctr)
			}},
		}),
	)
}

// startClickHouse starts a ClickHouse server; the tests reach it over the
// native protocol (port 9000), the HTTP port serves the readiness check.
func startClickHouse(ctx context.Context) (testcontainers.Container, string, error) {
	return run(ctx, clickhouseImage, "9000/tcp",
		testcontainers.WithExposedPorts("8123/tcp"),
		testcontainers.WithEnv(map[string]string{
			"CLICKHOUSE_USER":                      clickhouseUser,
			"CLICKHOUSE_PASSWORD":                  clickhousePassword,
			"CLICKHOUSE_DEFAULT_ACCESS_MANAGEMENT": "1",
		}),
		testcontainers.WithWaitStrategy(wait.ForHTTP("/ping").WithPort("8123/tcp").WithStartupTimeout(2*time.Minute)),
	)
}

// startValkey starts Valkey as the local Redis runs: nothing persisted.
func startValkey(ctx context.Context) (testcontainers.Container, string, error) {
	return run(ctx, valkeyImage, "6379/tcp",
		testcontainers.WithCmd("valkey-server", "--save", "", "--appendonly", "no"),
		testcontainers.WithWaitStrategy(wait.ForLog("Ready to accept connections").WithStartupTimeout(time.Minute)),
	)
}

// sharedContainers is the one set of containers of a test binary, started
// by the first Require that needs it. It stays up while the binary runs
// (its tests use fresh names, so they share it as they share the local
// services) and testcontainers' reaper removes it once the binary exits.
// It is package state because a test binary has one such set.
var sharedContainers struct {
	once sync.Once
	env  Env
	err  error
}

// containersTimeout bounds starting the shared set, image pulls included.
const containersTimeout = 10 * time.Minute

// startShared starts the shared set on first use and returns its Env. It
// also exports the set's variables into this process's environment, so
// the walhouse processes a test starts see these services (their flags
// default to WALHOUSE_* variables), as they see the local ones after
// `. .local/env`; the variables of listeners the set lacks are cleared.
func startShared(context.Context) (Env, error) {
	s := &sharedContainers
	s.once.Do(func() {
		// Not the test's context: the set outlives the test that starts it.
		ctx, cancel := context.WithTimeout(context.Background(), containersTimeout)
		defer cancel()
		c, err := StartContainers(ctx)
		if err != nil {
			s.err = err
			return
		}
		s.env = c.Env()
		for _, v := range s.env.vars() {
			if !v.service() {
				continue
			}
			if *v.value == "" {
				s.err = errors.Join(s.err, os.Unsetenv(v.name))
			} else {
				s.err = errors.Join(s.err, os.Setenv(v.name, *v.value))
			}
		}
	})
	return s.env, s.err
}
