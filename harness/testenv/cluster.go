package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"
	"golang.org/x/sync/errgroup"
)

// keeperImage is ClickHouse Keeper of the server's release.
const keeperImage = "clickhouse/clickhouse-keeper:25.3.6.56"

// ClusterName is the name of the cluster StartClickHouseCluster defines in
// every server's remote_servers.
const ClusterName = "walhouse"

// ClickHouseCluster is a ClickHouse cluster as containers on a network of
// their own: one ClickHouse Keeper and, per shard, replicas of
// clickhouse-server, each configured with the cluster in remote_servers
// (internal_replication on, as replicated tables need), its shard and
// replica macros and Keeper.
type ClickHouseCluster struct {
	// Hosts are native-protocol DSNs of the servers, reached from this
	// host, by shard then replica (Hosts[0][0] is shard 1, replica 1).
	Hosts [][]string

	network *testcontainers.DockerNetwork
	all     []testcontainers.Container
}

// clusterNode is one server of the cluster's configuration.
type clusterNode struct {
	Alias          string // its name on the cluster's network
	Shard, Replica int
}

// clusterConfig is each server's config.d file: the cluster, Keeper, the
// host's macros and the name replicas fetch its parts by.
var clusterConfig = template.Must(template.New("cluster").Parse(`<clickhouse>
    <remote_servers>
        <{{.Cluster}}>
{{- range .Shards}}
            <shard>
                <internal_replication>true</internal_replication>
{{- range .}}
                <replica><host>{{.Alias}}</host><port>9000</port><user>{{$.User}}</user><password>{{$.Password}}</password></replica>
{{- end}}
            </shard>
{{- end}}
        </{{.Cluster}}>
    </remote_servers>
    <zookeeper>
        <node><host>keeper</host><port>9181</port></node>
    </zookeeper>
    <macros>
        <shard>{{.Self.Shard}}</shard>
        <replica>{{.Self.Alias}}</replica>
    </macros>
    <interserver_http_host>{{.Self.Alias}}</interserver_http_host>
    <distributed_ddl>
        <path>/clickhouse/task_queue/ddl</path>
    </distributed_ddl>
</clickhouse>
`))

// keeperConfig runs one Keeper node, its data in the container.
const keeperConfig = `<clickhouse>
    <listen_host>0.0.0.0</listen_host>
    <logger><level>information</level><console>1</console></logger>
    <keeper_server>
        <tcp_port>9181</tcp_port>
        <server_id>1</server_id>
        <log_storage_path>/tmp/keeper/log</log_storage_path>
        <snapshot_storage_path>/tmp/keeper/snapshots</snapshot_storage_path>
        <raft_configuration>
            <server><id>1</id><hostname>keeper</hostname><port>9234</port></server>
        </raft_configuration>
    </keeper_server>
</clickhouse>
`

// StartClickHouseCluster starts a cluster of shards × replicas servers and
// one Keeper, and returns once every server answers. Without a container
// engine it returns an error that wraps ErrNoEngine. The caller calls
// Terminate when done.
func StartClickHouseCluster(ctx context.Context, shards, replicas int) (*ClickHouseCluster, error) {
	if err := checkEngine(ctx); err != nil {
		return nil, err
	}
	nw, err := network.New(ctx, network.WithLabels(map[string]string{containerLabel: "1"}))
	if err != nil {
		return nil, fmt.Errorf("create the cluster's network: %w", err)
	}
	c := &ClickHouseCluster{network: nw}
	fail := func(err error) (*ClickHouseCluster, error) {
		return nil, errors.Join(err, c.Terminate(context.WithoutCancel(ctx)))
	}
	keeper, err := testcontainers.Run(ctx, keeperImage,
		network.WithNetwork([]string{"keeper"}, nw),
		testcontainers.WithLabels(map[string]string{containerLabel: "1"}),
		testcontainers.WithFiles(testcontainers.ContainerFile{Reader: strings.NewReader(keeperConfig), ContainerFilePath: "/etc/walhouse-keeper.xml", FileMode: 0o644}),
		testcontainers.WithEntrypoint("clickhouse-keeper", "--config-file=/etc/walhouse-keeper.xml"),
		testcontainers.WithExposedPorts("9181/tcp"),
		testcontainers.WithWaitStrategy(wait.ForListeningPort("9181/tcp").WithStartupTimeout(2*time.Minute)),
	)
	if keeper != nil {
		c.all = append(c.all, keeper)
	}
	if err != nil {
		return fail(fmt.Errorf("%s: %w", keeperImage, err))
	}

	layout := make([][]clusterNode, shards)
	for s := range layout {
		for r := range replicas {
			layout[s] = append(layout[s], clusterNode{Alias: fmt.Sprintf("ch-s%d-r%d", s+1, r+1), Shard: s + 1, Replica: r + 1})
		}
	}
	c.Hosts = make([][]string, shards)
	for s := range c.Hosts {
		c.Hosts[s] = make([]string, replicas)
	}
	type started struct {
		ctr  testcontainers.Container
		node clusterNode
		addr string
	}
	results := make(chan started, shards*replicas)
	g, gctx := errgroup.WithContext(ctx)
	for _, shard := range layout {
		for _, node := range shard {
			g.Go(func() error {
				var cfg bytes.Buffer
				if err := clusterConfig.Execute(&cfg, map[string]any{
					"Cluster": ClusterName, "Shards": layout, "Self": node, "User": clickhouseUser, "Password": clickhousePassword,
				}); err != nil {
					return err
				}
				ctr, addr, err := run(gctx, clickhouseImage, "9000/tcp",
					network.WithNetwork([]string{node.Alias}, nw),
					testcontainers.WithExposedPorts("8123/tcp"),
					testcontainers.WithEnv(map[string]string{
						"CLICKHOUSE_USER":                      clickhouseUser,
						"CLICKHOUSE_PASSWORD":                  clickhousePassword,
						"CLICKHOUSE_DEFAULT_ACCESS_MANAGEMENT": "1",
					}),
					testcontainers.WithFiles(testcontainers.ContainerFile{Reader: &cfg, ContainerFilePath: "/etc/clickhouse-server/config.d/walhouse-cluster.xml", FileMode: 0o644}),
					testcontainers.WithWaitStrategy(wait.ForHTTP("/ping").WithPort("8123/tcp").WithStartupTimeout(3*time.Minute)),
				)
				results <- started{ctr, node, addr}
				return err
			})
		}
	}
	err = g.Wait()
	close(results)
	for r := range results {
		if r.ctr != nil {
			c.all = append(c.all, r.ctr)
		}
		dsn := url.URL{Scheme: "clickhouse", User: url.UserPassword(clickhouseUser, clickhousePassword), Host: r.addr}
		c.Hosts[r.node.Shard-1][r.node.Replica-1] = dsn.String()
	}
	if err != nil {
		return fail(fmt.Errorf("start the cluster's servers: %w", err))
	}
	return c, nil
}

// Terminate removes the containers and the network.
func (c *ClickHouseCluster) Terminate(ctx context.Context) error {
	var errs []error
	for _, ctr := range c.all {
		if err := ctr.Terminate(ctx); err != nil {
			errs = append(errs, fmt.Errorf("remove container %s: %w", ctr.GetContainerID(), err))
		}
	}
	if c.network != nil {
		if err := c.network.Remove(ctx); err != nil {
			errs = append(errs, fmt.Errorf("remove the cluster's network: %w", err))
		}
	}
	return errors.Join(errs...)
}

// RequireClickHouseCluster starts a cluster of shards × replicas for t
// (removed when t ends), or skips t. It needs WALHOUSE_SERVICES=containers:
// otherwise t skips saying so, whatever WALHOUSE_INTEGRATION says, since
// the local services have no cluster. Without a Docker engine t skips with
// "no Docker engine: …", or fails when integration tests are required
// (WALHOUSE_INTEGRATION=1), as Require does.
func RequireClickHouseCluster(t testing.TB, shards, replicas int) *ClickHouseCluster {
	t.Helper()
	if os.Getenv("WALHOUSE_INTEGRATION") == "0" {
		t.Skip("integration tests disabled (WALHOUSE_INTEGRATION=0, as in make unit)")
	}
	if os.Getenv("WALHOUSE_SERVICES") != BackendContainers {
		t.Skipf("SKIPPED, not passed: needs a ClickHouse cluster of %d shards × %d replicas and Keeper as containers; "+
			"run with WALHOUSE_SERVICES=containers where a Docker engine exists (the local services have one embedded ClickHouse, without Keeper)", shards, replicas)
	}
	ctx, cancel := context.WithTimeout(context.Background(), containersTimeout)
	defer cancel()
	c, err := StartClickHouseCluster(ctx, shards, replicas)
	switch {
	case errors.Is(err, ErrNoEngine) && !Required():
		t.Skip("SKIPPED, not passed: " + err.Error())
	case errors.Is(err, ErrNoEngine):
		t.Fatal(err.Error() + " (WALHOUSE_INTEGRATION=1 requires the services: failing, not skipping)")
	case err != nil:
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Terminate(context.Background()); err != nil {
			t.Log(err)
		}
	})
	return c
}
