#!/usr/bin/env bash
# Start a real single-host OpenStack (2026.1) on 127.0.0.1 from a clean state:
# MariaDB, RabbitMQ, Keystone, Placement, Glance, Nova (fake virt, one compute
# per pool), Neutron (ML2 with our bind-every-port driver), Cinder (one
# storage-less backend per pool). Every process is recorded in $RUN/*.pid.
# Needs GROUND_ADMIN_PASSWORD, GROUND_MEMBER_PASSWORD, GROUND_SERVICE_PASSWORD, GROUND_METADATA_SECRET.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
B=$OSVENV/bin
DB_PASSWORD=ground-db
DBURL="mysql+pymysql://ground:$DB_PASSWORD@$API"
export OS_NOVA_CONFIG_DIR=$ETC/nova OS_PLACEMENT_CONFIG_DIR=$ETC/placement \
       OS_GLANCE_CONFIG_DIR=$ETC/glance OS_KEYSTONE_CONFIG_DIR=$ETC/keystone \
       OS_NEUTRON_CONFIG_DIR=$ETC/neutron OS_NEUTRON_CONFIG_FILES="neutron.conf;ml2_conf.ini"
export GROUND_API_HOST=$API GROUND_COMPUTES=$COMPUTES GROUND_POOLS=$POOLS GROUND_EXTERNAL_CIDR=$EXT_CIDR

mkdir -p "$S"/{mysql,rabbit,keystone,glance/images,glance/staging,glance/tasks,neutron,cinder,nova} \
         "$ETC"/{keystone,nova/provider_config,placement,glance,neutron,cinder} "$LOG" "$RUN"

# ------------------------------------------------------------------ configs
auth_section() {  # $1 = service user
  cat <<CONF
auth_url = http://$API:5000/v3
auth_type = password
project_domain_name = Default
user_domain_name = Default
project_name = service
username = $1
password = $GROUND_SERVICE_PASSWORD
region_name = RegionOne
CONF
}
authtoken() {  # $1 = service user, $2 = service type (keystonemiddleware refuses
               # access-rule tokens when it does not know its own service type)
  printf '[keystone_authtoken]\nwww_authenticate_uri = http://%s:5000\nservice_type = %s\n' "$API" "$2"
  auth_section "$1"
}

cat > "$S/my.cnf" <<CONF
[mysqld]
datadir=$S/mysql
socket=$RUN/mysqld.sock
pid-file=$RUN/mysqld.real.pid
port=3306
bind-address=$API
user=root
skip-name-resolve
max_connections=1000
innodb_buffer_pool_size=128M
innodb_flush_log_at_trx_commit=0
innodb_doublewrite=0
skip-log-bin
character-set-server=utf8mb4
collation-server=utf8mb4_general_ci
CONF

cat > "$ETC/keystone/keystone.conf" <<CONF
[DEFAULT]
log_file = $LOG/keystone.log
[database]
connection = $DBURL/keystone
[token]
provider = fernet
[fernet_tokens]
key_repository = $S/keystone/fernet-keys
[credential]
key_repository = $S/keystone/credential-keys
[identity]
password_hash_rounds = 4
CONF

cat > "$ETC/placement/placement.conf" <<CONF
[DEFAULT]
log_file = $LOG/placement.log
[placement_database]
connection = $DBURL/placement
[api]
auth_strategy = keystone
$(authtoken placement placement)
CONF

cp "$OSVENV/etc/glance/glance-api-paste.ini" "$ETC/glance/"
cat > "$ETC/glance/glance-api.conf" <<CONF
[DEFAULT]
log_file = $LOG/glance-api.log
enabled_backends = fs:file
worker_self_reference_url = http://$API:9292
[database]
connection = $DBURL/glance
[paste_deploy]
flavor = keystone
config_file = $ETC/glance/glance-api-paste.ini
[glance_store]
default_backend = fs
[fs]
filesystem_store_datadir = $S/glance/images
[os_glance_staging_store]
filesystem_store_datadir = $S/glance/staging
[os_glance_tasks_store]
filesystem_store_datadir = $S/glance/tasks
[oslo_concurrency]
lock_path = $S/glance/lock
$(authtoken glance image)
CONF

cp "$OSVENV/etc/nova/api-paste.ini" "$ETC/nova/"
cat > "$ETC/nova/nova.conf" <<CONF
[DEFAULT]
log_dir = $LOG
transport_url = rabbit://guest:guest@$API:5672/
compute_driver = fake.FakeDriver
state_path = $S/nova
my_ip = $API
vif_plugging_is_fatal = False
vif_plugging_timeout = 0
default_availability_zone = nova
graceful_shutdown_timeout = 5
[api]
auth_strategy = keystone
[wsgi]
api_paste_config = $ETC/nova/api-paste.ini
[api_database]
connection = $DBURL/nova_api
[database]
connection = $DBURL/nova
[conductor]
workers = 1
[scheduler]
workers = 1
discover_hosts_in_cells_interval = 5
[compute]
provider_config_location = $ETC/nova/provider_config
[oslo_concurrency]
lock_path = $S/nova/lock
$(authtoken nova compute)
[service_user]
send_service_user_token = True
$(auth_section nova)
[placement]
$(auth_section nova)
[neutron]
# the metadata API behind Neutron's proxy, as on a real cloud (ground/ext/gpu_rent_ground/metadata_proxy.py)
service_metadata_proxy = True
metadata_proxy_shared_secret = $GROUND_METADATA_SECRET
$(auth_section nova)
[cinder]
os_region_name = RegionOne
# volumes Nova makes from block-device mappings land in the server's pool, as on clouds with
# pool-local storage (Selectel): a volume in another pool cannot be attached
cross_az_attach = False
$(auth_section nova)
[glance]
region_name = RegionOne
CONF
for c in $COMPUTES; do
  # one fake compute per pool: its own host name and state dir (compute_id file)
  cat > "$ETC/nova/nova-compute-$c.conf" <<CONF
[DEFAULT]
host = ground-$c
state_path = $S/nova-$c
log_file = $LOG/nova-compute-$c.log
CONF
  mkdir -p "$S/nova-$c"
  # GPUs as placement inventory: 4 L4 and 1 A10 per compute, no A100 anywhere
  cat > "$ETC/nova/provider_config/gpu-$c.yaml" <<CONF
meta:
  schema_version: '1.0'
providers:
  - identification:
      name: ground-$c
    inventories:
      additional:
        - CUSTOM_GPU_L4:
            total: 4
            max_unit: 1
        - CUSTOM_GPU_A10:
            total: 1
            max_unit: 1
CONF
done

cp "$OSVENV/etc/neutron/api-paste.ini" "$ETC/neutron/"
cat > "$ETC/neutron/neutron.conf" <<CONF
[DEFAULT]
log_file = $LOG/neutron-api.log
core_plugin = ml2
service_plugins = router
auth_strategy = keystone
api_paste_config = $ETC/neutron/api-paste.ini
transport_url = rabbit://guest:guest@$API:5672/
state_path = $S/neutron
api_workers = 1
rpc_workers = 0
rpc_state_report_workers = 0
allow_overlapping_ips = True
notify_nova_on_port_status_changes = True
notify_nova_on_port_data_changes = True
dhcp_agent_notification = False
[database]
connection = $DBURL/neutron
[oslo_concurrency]
lock_path = $S/neutron/lock
$(authtoken neutron network)
[nova]
$(auth_section nova)
CONF
cat > "$ETC/neutron/ml2_conf.ini" <<CONF
[ml2]
type_drivers = flat,vxlan
tenant_network_types = vxlan
mechanism_drivers = gpu_rent_ground
extension_drivers = port_security
[ml2_type_flat]
flat_networks = public
[ml2_type_vxlan]
vni_ranges = 1:10000
CONF

backends=""; for p in $POOLS; do backends="$backends${backends:+,}ground-$p"; done
first_pool=${POOLS%% *}
{
  cat <<CONF
[DEFAULT]
log_dir = $LOG
transport_url = rabbit://guest:guest@$API:5672/
auth_strategy = keystone
api_paste_config = $OSVENV/etc/cinder/api-paste.ini
# without it, ?name= list filters are refused with 400 "Invalid filters"
resource_query_filters_file = $OSVENV/etc/cinder/resource_filters.json
state_path = $S/cinder
my_ip = $API
host = ground
enabled_backends = $backends
storage_availability_zone = $first_pool
default_availability_zone = $first_pool
default_volume_type = fast.$first_pool
osapi_volume_workers = 1
graceful_shutdown_timeout = 5
[database]
connection = $DBURL/cinder
[oslo_concurrency]
lock_path = $S/cinder/lock
$(authtoken cinder block-storage)
[nova]
$(auth_section cinder)
[service_user]
send_service_user_token = True
$(auth_section cinder)
CONF
  for p in $POOLS; do  # one backend per pool, in that pool's availability zone
    printf '[ground-%s]\nvolume_driver = gpu_rent_ground.cinder_driver.NoStorageDriver\nvolume_backend_name = ground-%s\nbackend_availability_zone = %s\n' "$p" "$p" "$p"
  done
} > "$ETC/cinder/cinder.conf"

# ------------------------------------------------------------------ MariaDB, RabbitMQ
log "starting MariaDB and RabbitMQ"
mariadb-install-db --defaults-file="$S/my.cnf" --auth-root-authentication-method=socket \
  --skip-test-db >"$LOG/mysql-install.log" 2>&1 || die "mariadb-install-db, see $LOG/mysql-install.log"
start_bg mysqld "$LOG/mysqld.log" mariadbd --defaults-file="$S/my.cnf"
(
  export HOME=$S/rabbit RABBITMQ_MNESIA_BASE=$S/rabbit/mnesia RABBITMQ_LOG_BASE=$LOG/rabbit \
         RABBITMQ_NODENAME=rabbit@localhost RABBITMQ_NODE_IP_ADDRESS=$API RABBITMQ_NODE_PORT=5672 \
         ERL_EPMD_ADDRESS=$API RABBITMQ_PID_FILE=$RUN/rabbit-beam.pid \
         RABBITMQ_ENABLED_PLUGINS_FILE=$S/rabbit/enabled_plugins \
         RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
  echo '[].' > "$S/rabbit/enabled_plugins"
  start_bg epmd "$LOG/epmd.log" epmd -address "$API"
  sleep 0.3
  start_bg rabbit "$LOG/rabbit.out" /usr/lib/rabbitmq/bin/rabbitmq-server
)
for _ in $(seq 1 160); do mariadb --socket="$RUN/mysqld.sock" -e 'select 1' >/dev/null 2>&1 && break; sleep 0.25; done
databases="keystone placement nova_api nova nova_cell0 glance neutron cinder"
{
  echo "CREATE USER IF NOT EXISTS 'ground'@'127.0.0.1' IDENTIFIED BY '$DB_PASSWORD';"
  for d in $databases; do echo "CREATE DATABASE IF NOT EXISTS $d; GRANT ALL ON $d.* TO 'ground'@'127.0.0.1';"; done
} | mariadb --socket="$RUN/mysqld.sock" || die "MariaDB did not start, see $LOG/mysqld.log"

# ------------------------------------------------------------------ schemas, in parallel
log "database schemas"
pids=()
( K="$B/keystone-manage --config-file $ETC/keystone/keystone.conf"
  $K db_sync && $K fernet_setup --keystone-user root --keystone-group root &&
  $K credential_setup --keystone-user root --keystone-group root &&
  $K bootstrap --bootstrap-password="$GROUND_ADMIN_PASSWORD" --bootstrap-region-id RegionOne \
     --bootstrap-admin-url "http://$API:5000/v3/" --bootstrap-public-url "http://$API:5000/v3/" \
     --bootstrap-internal-url "http://$API:5000/v3/" ) >"$LOG/db-keystone.log" 2>&1 & pids+=($!)
( "$B/placement-manage" --config-file "$ETC/placement/placement.conf" db sync ) >"$LOG/db-placement.log" 2>&1 & pids+=($!)
( N="$B/nova-manage --config-file $ETC/nova/nova.conf"
  $N api_db sync && $N cell_v2 map_cell0 --database_connection "$DBURL/nova_cell0" &&
  $N cell_v2 create_cell --name cell1 && $N db sync ) >"$LOG/db-nova.log" 2>&1 & pids+=($!)
( "$B/glance-manage" --config-file "$ETC/glance/glance-api.conf" db_sync ) >"$LOG/db-glance.log" 2>&1 & pids+=($!)
( "$B/neutron-db-manage" --config-file "$ETC/neutron/neutron.conf" --config-file "$ETC/neutron/ml2_conf.ini" upgrade heads ) >"$LOG/db-neutron.log" 2>&1 & pids+=($!)
( "$B/cinder-manage" --config-file "$ETC/cinder/cinder.conf" db sync ) >"$LOG/db-cinder.log" 2>&1 & pids+=($!)
for p in "${pids[@]}"; do wait "$p" || die "a schema job failed, see $LOG/db-*.log"; done
# rabbitmqctl must read the same Erlang cookie as the server, hence the same HOME
HOME=$S/rabbit /usr/lib/rabbitmq/bin/rabbitmqctl -n rabbit@localhost wait "$RUN/rabbit-beam.pid" --timeout 60 >/dev/null \
  || die "RabbitMQ did not start, see $LOG/rabbit.out"

# ------------------------------------------------------------------ services
serve() {  # name module:app port [oslo args]
  local name=$1 app=$2 port=$3; shift 3
  # how to start it again, for ground/service.sh (the fault tests stop and restart an API)
  { export -p | grep -E '^declare -x (OS_|GROUND_)'
    printf 'exec %q -m gpu_rent_ground.serve %q %q' "$B/python" "$app" "$API:$port"
    if [ $# -gt 0 ]; then printf ' %q' "$@"; fi; printf '\n'; } > "$RUN/$name.start"
  start_bg "$name" "$LOG/$name.out" "$B/python" -m gpu_rent_ground.serve "$app" "$API:$port" "$@"
}
GROUND_SERVE_WORKERS=4 GROUND_SERVE_THREADS=1 serve keystone keystone.wsgi.api:application 5000
wait_http "http://$API:5000/v3"
log "Keystone up; catalog, service users, project gpu-rent"
"$B/python" -m gpu_rent_ground.seed catalog >>"$LOG/seed.log" 2>&1 || die "seed catalog, see $LOG/seed.log"
serve placement-api placement.wsgi.api:application 8778
serve glance-api glance.wsgi.api:application 9292
printf '[DEFAULT]\nlog_file = %s\n' "$LOG/nova-api.log" > "$ETC/nova/nova-api.conf"
OS_NOVA_CONFIG_FILES="api-paste.ini;nova.conf;nova-api.conf" serve nova-api nova.wsgi.osapi_compute:application 8774
printf '[DEFAULT]\nlog_file = %s\n' "$LOG/nova-metadata.log" > "$ETC/nova/nova-metadata.conf"
OS_NOVA_CONFIG_FILES="api-paste.ini;nova.conf;nova-metadata.conf" serve nova-metadata nova.wsgi.metadata:application 8775
serve neutron-api neutron.wsgi.api:application 9696
serve cinder-api cinder.wsgi.api:application 8776 --config-file "$ETC/cinder/cinder.conf" --log-file "$LOG/cinder-api.log"
for port in 8778 9292 8774 8775 9696 8776; do wait_http "http://$API:$port/" 120; done
log "all APIs answer"
# RPC services only now: a compute that cannot reach placement at start-up
# creates its resource provider only at the next periodic run (60 s later)
start_bg nova-conductor "$LOG/nova-conductor.out" "$B/nova-conductor" --config-file "$ETC/nova/nova.conf"
start_bg nova-scheduler "$LOG/nova-scheduler.out" "$B/nova-scheduler" --config-file "$ETC/nova/nova.conf"
for c in $COMPUTES; do
  start_bg "nova-compute-$c" "$LOG/nova-compute-$c.out" "$B/nova-compute" \
    --config-file "$ETC/nova/nova.conf" --config-file "$ETC/nova/nova-compute-$c.conf"
done
start_bg cinder-scheduler "$LOG/cinder-scheduler.out" "$B/cinder-scheduler" --config-file "$ETC/cinder/cinder.conf"
start_bg cinder-volume "$LOG/cinder-volume.out" "$B/cinder-volume" --config-file "$ETC/cinder/cinder.conf"

# map the computes to cell1 now rather than waiting for the scheduler's
# periodic discovery (seen to take up to ~50 s)
NM="$B/nova-manage --config-file $ETC/nova/nova.conf"
n_computes=$(echo "$COMPUTES" | wc -w)
for _ in $(seq 1 60); do
  sleep 2
  $NM cell_v2 discover_hosts >/dev/null 2>&1 || true
  [ "$($NM cell_v2 list_hosts 2>/dev/null | grep -c ' ground-')" -ge "$n_computes" ] && break
done
log "computes mapped; pools, flavors, image, external network, quotas"
"$B/python" -m gpu_rent_ground.seed resources >>"$LOG/seed.log" 2>&1 || die "seed resources, see $LOG/seed.log"
# belt and braces: mirror the AZ aggregates into placement
$NM placement sync_aggregates >"$LOG/sync-aggregates.log" 2>&1 || true
log "OpenStack ready"
