//! A STAND-IN for what moto does not model of EC2 capacity: an HTTP proxy on 127.0.0.1 in
//! front of moto. Processes reach it through the SDK's own `AWS_ENDPOINT_URL_EC2`, so only EC2
//! calls pass here; every request it does not answer itself goes to moto, and moto's answer
//! comes back.
//! - Running out of capacity: a RunInstances for an instance type it is told has no capacity is
//!   answered as EC2 answers it ("Error codes for the Amazon EC2 API": HTTP 500, an `<Errors>`
//!   document with the code, e.g. `InsufficientInstanceCapacity`).
//! - Capacity Reservations and Capacity Blocks, which moto has no API for: it answers
//!   DescribeCapacityReservations for those it is given, refuses a RunInstances targeting one
//!   that is full (`ReservationCapacityExceeded`), of another type, in another zone than the
//!   launch's subnet, or a Capacity Block without the `capacity-block` market type, and counts each launch into one. moto launches the
//!   instance (without the market type, which it would take for Spot), and DescribeInstances
//!   answers then carry the instance's `capacityReservationId` and, in a Capacity Block, its
//!   `capacity-block` lifecycle, as EC2's do.
//! - Throttling: the next calls of an action it is told to throttle get EC2's
//!   `RequestLimitExceeded` (HTTP 503), as EC2 answers a caller over its request rate ("Request
//!   throttling for the Amazon EC2 API" and "Error codes for the Amazon EC2 API", EC2 API
//!   Reference); the SDK's retry classifier counts the code as throttling.

use std::collections::BTreeMap;
use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use super::server::{parse_form, read_request, Request, Server};

#[derive(Default)]
struct State {
    moto_port: u16,
    /// Instance type -> the error code every RunInstances of it gets.
    refused: BTreeMap<String, String>,
    /// Each RunInstances' fields, in order, answered by the stand-in or by moto.
    run_instances: Vec<BTreeMap<String, String>>,
    reservations: BTreeMap<String, Reservation>,
    /// Each instance launched into a reservation: the reservation's id.
    launched_into: BTreeMap<String, String>,
    /// Action -> how many more of its calls are throttled.
    throttled: BTreeMap<String, u32>,
    /// Subnet -> its zone, as the test made it in moto.
    subnet_zones: BTreeMap<String, String>,
}

/// A Capacity Reservation or Capacity Block as the stand-in keeps it.
#[derive(Clone)]
pub struct Reservation {
    pub instance_type: String,
    pub zone: String,
    pub total: u32,
    pub available: u32,
    pub end: SystemTime,
    pub capacity_block: bool,
}

const TARGET: &str =
    "CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId";
const MARKET: &str = "InstanceMarketOptions.MarketType";

pub struct Ec2CapacityStandIn {
    server: Server<State>,
}

impl Ec2CapacityStandIn {
    /// In front of moto on `moto_port`.
    pub fn start(moto_port: u16) -> Ec2CapacityStandIn {
        let server = Server::start("EC2 capacity stand-in", serve);
        server.lock().moto_port = moto_port;
        Ec2CapacityStandIn { server }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.server.port)
    }

    /// Every RunInstances of `instance_type` from now on gets `code`.
    pub fn refuse(&self, instance_type: &str, code: &str) {
        let mut s = self.server.lock();
        s.refused.insert(instance_type.into(), code.into());
    }

    /// The next `times` calls of `action` are throttled.
    pub fn throttle(&self, action: &str, times: u32) {
        self.server.lock().throttled.insert(action.into(), times);
    }

    /// `instance_type` has capacity again.
    pub fn allow(&self, instance_type: &str) {
        self.server.lock().refused.remove(instance_type);
    }

    /// A reservation of `total` instances of `instance_type` in `zone`, ending `lasts` from now.
    pub fn reserve(&self, id: &str, instance_type: &str, total: u32, lasts: Duration, block: bool) {
        let r = Reservation {
            instance_type: instance_type.into(),
            zone: "us-east-1a".into(),
            total,
            available: total,
            end: SystemTime::now() + lasts,
            capacity_block: block,
        };
        self.server.lock().reservations.insert(id.into(), r);
    }

    /// A subnet the test made in moto is in `zone`: a launch into it targeting a reservation
    /// of another zone is refused.
    pub fn subnet_in(&self, subnet: &str, zone: &str) {
        let mut s = self.server.lock();
        s.subnet_zones.insert(subnet.into(), zone.into());
    }

    /// The reservation now ends `after` from now (time passing, in one call).
    pub fn ends_in(&self, id: &str, after: Duration) {
        let mut s = self.server.lock();
        let r = s
            .reservations
            .get_mut(id)
            .expect("a reservation the stand-in holds");
        r.end = SystemTime::now() + after;
    }

    pub fn available(&self, id: &str) -> u32 {
        self.server.lock().reservations[id].available
    }

    /// Each RunInstances' fields, in order.
    pub fn run_instances(&self) -> Vec<BTreeMap<String, String>> {
        self.server.lock().run_instances.clone()
    }

    /// The instance type each RunInstances asked for, in order.
    pub fn run_instances_types(&self) -> Vec<String> {
        let s = self.server.lock();
        let types = s.run_instances.iter();
        types
            .map(|f| f.get("InstanceType").cloned().unwrap_or_default())
            .collect()
    }
}

/// One request per connection: the answer says `Connection: close`, so the client never sends
/// a second request on a connection moto has closed.
fn serve(conn: TcpStream, state: &Mutex<State>) {
    let Ok(mut out) = conn.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(conn);
    let Some(request) = read_request(&mut reader) else {
        return;
    };
    let fields = parse_form(&request.body);
    let moto = state.lock().expect("EC2 stand-in state").moto_port;
    let action = fields.get("Action").cloned().unwrap_or_default();
    if take_throttle(state, &action) {
        let _ = out.write_all(&error(
            503,
            "RequestLimitExceeded",
            "Request limit exceeded.",
        ));
        return;
    }
    let answer = match fields.get("Action").map(String::as_str) {
        Some("RunInstances") => run_instances(state, moto, &request, &fields),
        Some("DescribeCapacityReservations") => describe_reservations(state, &fields),
        Some("DescribeInstances") => {
            let answer = forward_or_502(moto, &request);
            let s = state.lock().expect("EC2 stand-in state");
            with_reservations(answer, &s.launched_into, &s.reservations)
        }
        _ => forward_or_502(moto, &request),
    };
    let _ = out.write_all(&answer);
}

/// Whether this call of `action` is one of those to throttle (and one fewer is left).
fn take_throttle(state: &Mutex<State>, action: &str) -> bool {
    let mut s = state.lock().expect("EC2 stand-in state");
    match s.throttled.get_mut(action) {
        Some(left) if *left > 0 => {
            *left -= 1;
            true
        }
        _ => false,
    }
}

/// A launch: refused as EC2 would refuse it, or moto's, counted against its reservation.
fn run_instances(
    state: &Mutex<State>,
    moto: u16,
    request: &Request,
    fields: &BTreeMap<String, String>,
) -> Vec<u8> {
    let target = fields.get(TARGET).cloned();
    let count: u32 = (fields.get("MinCount"))
        .and_then(|c| c.parse().ok())
        .unwrap_or(1);
    {
        let mut s = state.lock().expect("EC2 stand-in state");
        s.run_instances.push(fields.clone());
        let wanted = fields.get("InstanceType").cloned().unwrap_or_default();
        if let Some(code) = s.refused.get(&wanted) {
            return refused(&wanted, code);
        }
        if let Some(why) = target
            .as_ref()
            .and_then(|cr| reservation_refuses(&s, cr, fields, count))
        {
            return why;
        }
    }
    let answer = forward_or_502(moto, &without_market(request));
    if let Some(cr) = target.filter(|_| answer.starts_with(b"HTTP/1.1 200")) {
        let mut s = state.lock().expect("EC2 stand-in state");
        if let Some(r) = s.reservations.get_mut(&cr) {
            r.available = r.available.saturating_sub(count);
        }
        for id in instance_ids(&answer) {
            s.launched_into.insert(id, cr.clone());
        }
    }
    answer
}

/// Why EC2 refuses a launch into reservation `cr` (the codes for a type or market that does not
/// match are the stand-in's choice; the full one is EC2's documented code).
fn reservation_refuses(
    s: &State,
    cr: &str,
    fields: &BTreeMap<String, String>,
    count: u32,
) -> Option<Vec<u8>> {
    let Some(r) = s.reservations.get(cr) else {
        let msg = format!("The capacity reservation ID '{cr}' does not exist");
        return Some(error(400, "InvalidCapacityReservationId.NotFound", &msg));
    };
    let block_market = fields.get(MARKET).map(String::as_str) == Some("capacity-block");
    if fields.get("InstanceType") != Some(&r.instance_type) {
        let msg = format!("{cr} reserves {}", r.instance_type);
        return Some(error(400, "InvalidParameterValue", &msg));
    }
    let subnet_zone = (fields.get("SubnetId")).and_then(|id| s.subnet_zones.get(id));
    if let Some(zone) = subnet_zone.filter(|z| **z != r.zone) {
        let msg = format!("{cr} is in {}, the subnet in {zone}", r.zone);
        return Some(error(400, "InvalidParameterCombination", &msg));
    }
    if block_market != r.capacity_block {
        let msg = "The market type must be capacity-block for a Capacity Block, and only then";
        return Some(error(400, "InvalidParameterCombination", msg));
    }
    (r.available < count).then(|| {
        let msg = "The targeted Capacity Reservation does not have enough available instance \
                   capacity to fulfill your request.";
        error(400, "ReservationCapacityExceeded", msg)
    })
}

/// The request without its market type: moto takes any market type for Spot.
fn without_market(request: &Request) -> Request {
    let body: Vec<&str> = (request.body.split('&'))
        .filter(|pair| !pair.starts_with(&format!("{MARKET}=")))
        .collect();
    let body = body.join("&");
    let headers = (request.headers.iter())
        .map(|h| with_length(h, body.len()))
        .collect();
    Request {
        line: request.line.clone(),
        headers,
        body,
    }
}

/// Every `<instanceId>` in an answer.
fn instance_ids(answer: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(answer);
    (text.split("<instanceId>").skip(1))
        .filter_map(|rest| {
            rest.split_once("</instanceId>")
                .map(|(id, _)| id.to_string())
        })
        .collect()
}

/// moto's DescribeInstances answer with each launched instance's reservation (and a Capacity
/// Block's lifecycle) beside its id, as EC2 lists them.
fn with_reservations(
    answer: Vec<u8>,
    launched: &BTreeMap<String, String>,
    reservations: &BTreeMap<String, Reservation>,
) -> Vec<u8> {
    let split =
        (answer.windows(4).position(|w| w == b"\r\n\r\n")).map_or(answer.len(), |at| at + 4);
    let (head, body) = answer.split_at(split);
    let mut body = String::from_utf8_lossy(body).into_owned();
    for (id, cr) in launched {
        let block = reservations.get(cr).is_some_and(|r| r.capacity_block);
        let mut extra = format!("<capacityReservationId>{cr}</capacityReservationId>");
        if block {
            extra.push_str("<instanceLifecycle>capacity-block</instanceLifecycle>");
        }
        let tag = format!("<instanceId>{id}</instanceId>");
        body = body.replace(&tag, &format!("{tag}{extra}"));
    }
    let head: String = (String::from_utf8_lossy(head).split("\r\n"))
        .filter(|h| !h.is_empty())
        .map(|h| format!("{}\r\n", with_length(h, body.len())))
        .collect();
    format!("{head}\r\n{body}").into_bytes()
}

/// A header as it was, but a `Content-Length`, which becomes `len`: the body was changed.
fn with_length(header: &str, len: usize) -> String {
    match header.to_ascii_lowercase().starts_with("content-length:") {
        true => format!("Content-Length: {len}"),
        false => header.to_string(),
    }
}

/// DescribeCapacityReservations of the ids asked for (all without ids), as EC2 answers it.
fn describe_reservations(state: &Mutex<State>, fields: &BTreeMap<String, String>) -> Vec<u8> {
    let s = state.lock().expect("EC2 stand-in state");
    let asked: Vec<&String> = (fields.iter())
        .filter(|(k, _)| k.starts_with("CapacityReservationId."))
        .map(|(_, v)| v)
        .collect();
    if let Some(unknown) = asked
        .iter()
        .find(|id| !s.reservations.contains_key(id.as_str()))
    {
        let msg = format!("The capacity reservation ID '{unknown}' does not exist");
        return error(400, "InvalidCapacityReservationId.NotFound", &msg);
    }
    let items: String = (s.reservations.iter())
        .filter(|(id, _)| asked.is_empty() || asked.contains(id))
        .map(|(id, r)| {
            let end = humantime::format_rfc3339_seconds(r.end);
            let kind = if r.capacity_block { "capacity-block" } else { "default" };
            format!(
                "<item><capacityReservationId>{id}</capacityReservationId><instanceType>{}</instanceType>\
                 <availabilityZone>{}</availabilityZone><totalInstanceCount>{}</totalInstanceCount>\
                 <availableInstanceCount>{}</availableInstanceCount><state>active</state>\
                 <endDate>{end}</endDate><reservationType>{kind}</reservationType></item>",
                r.instance_type, r.zone, r.total, r.available
            )
        })
        .collect();
    let xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<DescribeCapacityReservationsResponse \
         xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\"><requestId>stand-in</requestId>\
         <capacityReservationSet>{items}</capacityReservationSet></DescribeCapacityReservationsResponse>"
    );
    answer(200, "OK", &xml)
}

fn forward_or_502(moto: u16, request: &Request) -> Vec<u8> {
    forward(moto, request).unwrap_or_else(|e| {
        let body = format!("the stand-in could not reach moto: {e}");
        answer(502, "Bad Gateway", &body)
    })
}

/// EC2's error document.
fn error(status: u16, code: &str, message: &str) -> Vec<u8> {
    let xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{code}</Code>\
         <Message>{message}</Message></Error></Errors><RequestID>stand-in</RequestID></Response>"
    );
    let reason = match status {
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Bad Request",
    };
    answer(status, reason, &xml)
}

fn answer(status: u16, reason: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/xml;charset=UTF-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// EC2's error document for a launch it has no capacity for.
fn refused(instance_type: &str, code: &str) -> Vec<u8> {
    let message = format!(
        "We currently do not have sufficient {instance_type} capacity in the Availability Zone \
         you requested. Our system will be working on provisioning additional capacity."
    );
    error(500, code, &message)
}

/// The request to moto as it came (but for `Connection: close`), and moto's whole answer, its
/// own `Connection` header replaced by `close`.
fn forward(moto_port: u16, request: &Request) -> std::io::Result<Vec<u8>> {
    let mut moto = TcpStream::connect(("127.0.0.1", moto_port))?;
    let mut head = format!("{}\r\n", request.line);
    for h in request.headers.iter().filter(|h| !is_connection(h)) {
        head.push_str(&format!("{h}\r\n"));
    }
    head.push_str("Connection: close\r\n\r\n");
    moto.write_all(head.as_bytes())?;
    moto.write_all(request.body.as_bytes())?;
    let mut answer = Vec::new();
    moto.read_to_end(&mut answer)?;
    let split = (answer.windows(4).position(|w| w == b"\r\n\r\n")).unwrap_or(answer.len());
    let (head, body) = answer.split_at(split);
    let head = String::from_utf8_lossy(head);
    let mut out: String = (head.split("\r\n"))
        .filter(|h| !is_connection(h))
        .map(|h| format!("{h}\r\n"))
        .collect();
    out.push_str("Connection: close");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(body);
    Ok(bytes)
}

fn is_connection(header: &str) -> bool {
    (header.split_once(':')).is_some_and(|(k, _)| k.trim().eq_ignore_ascii_case("connection"))
}
