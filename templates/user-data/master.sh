#!/bin/bash
# dynamic-training master bootstrap, part 1 of 2, rendered by the CloudFormation stack
# ${AWS::StackName} (source: templates/user-data/master.sh). It only defines the master's hooks;
# templates/user-data/node.sh follows it in the master's user data and calls them.

# cfn-signal for the master group's CreationPolicy ("cfn-signal" and "CloudFormation helper
# scripts reference", CloudFormation Template Reference: on Amazon Linux it is /opt/aws/bin,
# from the aws-cfn-bootstrap package).
dt_signal() {
    [ -x /opt/aws/bin/cfn-signal ] || dnf install -y aws-cfn-bootstrap || true
    /opt/aws/bin/cfn-signal --exit-code "$1" --stack '${AWS::StackName}' \
        --resource MasterGroup --region '${AWS::Region}' || true
}
dt_failed() { dt_signal 1; }
dt_started() { dt_signal 0; }

# Workers write through the stack's access point as gid ${WorkerGid}: the shared directory is
# writable by that group but sticky (a worker cannot rename or delete what it does not own, such
# as the host files); the state directory and the prepare-data program's directory stay root's.
# dtd agent runs that program as root only if its directory is root's and written by no one
# else (README, "What a worker can put there"): a directory someone else made first (a worker,
# before this master booted) is moved aside whole, never adopted, since chown would make what
# they put in it root's.
dt_after_mount() {
    local dir script='${PrepareDataScriptPath}'
    chown 0:${WorkerGid} /myEFSvolume
    chmod 1775 /myEFSvolume
    mkdir -p /myEFSvolume/.dt
    chown -R 0:0 /myEFSvolume/.dt
    chmod -R go-w /myEFSvolume/.dt
    dir=$(dirname "$script")
    case "$dir" in /myEFSvolume/?*)
        if [ -e "$dir" ] && [ "$(stat -c %u "$dir")" != 0 ]; then
            echo "dt-bootstrap: $dir is not root's: moved to $dir.untrusted-$RANDOM"
            mv "$dir" "$dir.untrusted-$RANDOM"
        fi
        mkdir -p "$dir"
        chmod -R go-w "$dir"
    esac
    if [ -e "$script" ] && [ "$(stat -c %u "$script")" != 0 ]; then
        echo "dt-bootstrap: $script is not root's: moved to $script.untrusted"
        mv -f "$script" "$script.untrusted"
    fi
    dt_job_files
}

# The job's files (ack, host_worker_log, job.pid, progress) live in /myEFSvolume/job, root's and
# mode 0755, so workers cannot create them first; dtd believes them only when the job's user owns
# them (job.owner, by default this directory's owner: root, for a job started on this master).
# A directory someone else made first is moved aside, and each file is created empty (ack: 0),
# 0644, if it is not there. For a job that runs on the workers, chown the files to their uid
# and set job.owner (README, "What dtd believes of it"). With a TrainingScript the job is the
# workers' torchrun: their group may write here, and the config's job.owner is their uid.
dt_job_files() {
    local d=/myEFSvolume/job f
    [ "$(stat -c %u $d 2>/dev/null || echo 0)" = 0 ] || mv $d $d.untrusted-$RANDOM
    install -d -m 755 -o 0 -g 0 $d
    for f in host_worker_log job.pid progress; do [ -e $d/$f ] || : >$d/$f; done
    [ -e $d/ack ] || echo 0 >$d/ack
    chmod 644 $d/*
    [ -z '${TrainingScript}' ] || { chgrp ${WorkerGid} $d && chmod 775 $d; }
}

# A dtd that stays down (its unit fails after its start limit) marks this instance Unhealthy
# (instance id from IMDSv2; AWS CLI v2 ships with Amazon Linux 2023), and the group replaces it.
# The alerts' webhook URL from Secrets Manager (AlertWebhookSecret), in a file only root reads:
# the config names the file, so the secret is in no config, user data or worker.
dt_webhook() {
    local n arn='${AlertWebhookSecret}'
    [ -n "$arn" ] || return 0
    for n in 1 2 3 4 5; do
        (umask 077 && aws secretsmanager get-secret-value --region '${AWS::Region}' \
            --secret-id "$arn" --query SecretString --output text >/etc/dt/webhook.new) && break
        echo "dt-bootstrap: reading the webhook secret failed (attempt $n); retrying"
        sleep $((n * 5))
    done
    [ -s /etc/dt/webhook.new ] || { echo "dt-bootstrap: no webhook URL in $arn"; return 1; }
    mv /etc/dt/webhook.new /etc/dt/webhook
}

dt_before_start() {
    dt_webhook
    mkdir -p /etc/systemd/system/dtd.service.d
    printf '[Unit]\nOnFailure=dt-replace-master.service\n' \
        >/etc/systemd/system/dtd.service.d/replace-master.conf
    cat >/etc/systemd/system/dt-replace-master.service <<'DT_REPLACE_END'
[Unit]
Description=dynamic-training: have the group replace this master

[Service]
Type=oneshot
Environment=AWS_REGION=${AWS::Region}
ExecStart=/usr/local/sbin/dt-replace-master
DT_REPLACE_END
    cat >/usr/local/sbin/dt-replace-master <<'DT_SCRIPT_END'
#!/bin/bash
set -euo pipefail
imds=http://169.254.169.254/latest
token=$(curl -fsS -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' $imds/api/token)
id=$(curl -fsS -H "X-aws-ec2-metadata-token: $token" $imds/meta-data/instance-id)
aws autoscaling set-instance-health --instance-id "$id" --health-status Unhealthy \
    --no-should-respect-grace-period
DT_SCRIPT_END
    chmod 0755 /usr/local/sbin/dt-replace-master
}
