//! One launch from the worker template over the `workers.capacity` choices, in order: each is
//! a RunInstances with the choice's instance type and subnet as overrides, and a choice EC2
//! has no capacity for (its error code in [`NO_CAPACITY`]) hands over to the next. Any other
//! refusal ends the launch: the next choice would be refused the same way.

use aws_sdk_ec2::config::retry::RetryConfig;
use aws_sdk_ec2::error::ProvideErrorMetadata;
use aws_sdk_ec2::operation::run_instances::builders::RunInstancesFluentBuilder;
use aws_sdk_ec2::types::{
    CapacityReservationPreference, CapacityReservationSpecification, CapacityReservationTarget,
    InstanceMarketOptionsRequest, MarketType,
};
use aws_sdk_ec2::Client;

use super::ec2::template_spec;
use crate::aws::{describe_error, AwsError};
use crate::config::TemplateRef;
use crate::digest::Sha256;
use crate::model::{Choice, LaunchChoice, NO_CAPACITY};

/// One instance EC2 launched: its id and private IP (none yet is possible).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launched {
    pub id: String,
    pub ip: Option<String>,
    /// The choice it was launched as; `None`: the template's own type and subnet.
    pub choice: Option<Choice>,
}

/// What one launch did: the instances, or why none; and each choice EC2 had no capacity for
/// (the choice, the error code, EC2's message), in the order tried.
#[derive(Debug)]
pub struct Tried {
    pub launched: Result<Vec<Launched>, LaunchError>,
    pub no_capacity: Vec<(Choice, String, String)>,
}

/// Why a launch launched nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LaunchError {
    /// No capacity for this choice: its code in [`NO_CAPACITY`], and EC2's message (all that
    /// is shown of it when there were no choices to go on to).
    #[error("{message}")]
    NoCapacity { code: String, message: String },
    /// Any other refusal, whole: what it was, as whom, and why.
    #[error("RunInstances from {template}{}: {why}", as_choice(.choice))]
    Refused {
        template: String,
        choice: Option<String>,
        why: AwsError,
    },
    #[error("no capacity for any choice ({})", .0.join(", "))]
    NoChoiceLeft(Vec<String>),
}

fn as_choice(choice: &Option<String>) -> String {
    choice
        .as_ref()
        .map_or(String::new(), |c| format!(" as {c}"))
}

/// Launches `count` workers as the first choice that has capacity (`choices` empty: the
/// template as it is). `token`, when given, is the base of each attempt's ClientToken, so a
/// launch sent again returns what the first one launched ("Ensuring idempotency in Amazon EC2
/// API requests", Amazon EC2 API Reference).
pub async fn launch(
    client: &Client,
    template: &TemplateRef,
    choices: &[LaunchChoice],
    token: Option<&str>,
    count: i32,
) -> Tried {
    let mut no_capacity = Vec::new();
    if choices.is_empty() {
        let launched = run(client, template, None, token, count).await;
        return Tried {
            launched,
            no_capacity,
        };
    }
    for choice in choices {
        let token = token.map(|t| choice_token(t, &choice.choice));
        match run(client, template, Some(choice), token.as_deref(), count).await {
            Ok(launched) => {
                return Tried {
                    launched: Ok(launched),
                    no_capacity,
                }
            }
            Err(LaunchError::NoCapacity { code, message }) => {
                no_capacity.push((choice.choice.clone(), code, message));
            }
            Err(e) => {
                return Tried {
                    launched: Err(e),
                    no_capacity,
                }
            }
        }
    }
    let tried: Vec<String> = choices.iter().map(|c| c.choice.name()).collect();
    Tried {
        launched: Err(LaunchError::NoChoiceLeft(tried)),
        no_capacity,
    }
}

/// A token per choice: the same choice sent again is the same launch, another is a new one
/// (EC2 refuses a token reused with other parameters). At most 64 ASCII characters.
fn choice_token(token: &str, choice: &Choice) -> String {
    let digest = Sha256::of(choice.name().as_bytes()).to_string();
    let base: String = token.chars().take(64 - 13).collect();
    format!("{base}-{}", &digest[..12])
}

/// One RunInstances.
async fn run(
    client: &Client,
    template: &TemplateRef,
    choice: Option<&LaunchChoice>,
    token: Option<&str>,
    count: i32,
) -> Result<Vec<Launched>, LaunchError> {
    let mut call = (client.run_instances())
        .launch_template(template_spec(template))
        .min_count(count)
        .max_count(count)
        .set_client_token(token.map(str::to_string));
    if let Some(c) = choice {
        call = overrides(call, c);
    }
    // With choices, the next choice is the retry: the SDK's own retries of a capacity error
    // (an HTTP 500) would only delay it by seconds.
    let sent = match choice {
        Some(_) => {
            let once =
                aws_sdk_ec2::config::Builder::default().retry_config(RetryConfig::disabled());
            call.customize().config_override(once).send().await
        }
        None => call.send().await,
    };
    let out = sent.map_err(|e| {
        let code = e
            .as_service_error()
            .and_then(|s| s.code())
            .map(str::to_string);
        let said = (e.as_service_error())
            .and_then(|s| s.message())
            .map(str::to_string);
        match code {
            Some(code) if NO_CAPACITY.contains(&code.as_str()) => LaunchError::NoCapacity {
                code,
                message: said.unwrap_or_else(|| describe_error(&e)),
            },
            _ => LaunchError::Refused {
                template: template.to_string(),
                choice: choice.map(|c| c.choice.name()),
                why: AwsError::of(&e),
            },
        }
    })?;
    Ok((out.instances().iter())
        .map(|i| Launched {
            id: i.instance_id().unwrap_or("?").to_string(),
            ip: i.private_ip_address().map(str::to_string),
            choice: choice.map(|c| c.choice.clone()),
        })
        .collect())
}

/// The choice's type, subnet and reservation over the template's. A reservation is targeted
/// with `capacity-reservations-only`, so that a full one is refused (and the next choice
/// tried) rather than launched as plain On-Demand; a Capacity Block also needs its market type
/// ("Launch instances using Capacity Blocks", Amazon EC2 User Guide).
fn overrides(call: RunInstancesFluentBuilder, c: &LaunchChoice) -> RunInstancesFluentBuilder {
    let choice = &c.choice;
    let call = (call.instance_type(choice.instance_type.as_str().into()))
        .set_subnet_id(choice.subnet.clone());
    let Some(reservation) = choice.reservation.as_deref() else {
        return call;
    };
    let target = match choice.reservation_id() {
        Some(id) => CapacityReservationTarget::builder().capacity_reservation_id(id),
        None => CapacityReservationTarget::builder()
            .capacity_reservation_resource_group_arn(reservation),
    };
    let spec = CapacityReservationSpecification::builder()
        .capacity_reservation_preference(CapacityReservationPreference::CapacityReservationsOnly)
        .capacity_reservation_target(target.build())
        .build();
    let call = call.capacity_reservation_specification(spec);
    match c.capacity_block {
        true => call.instance_market_options(
            InstanceMarketOptionsRequest::builder()
                .market_type(MarketType::CapacityBlock)
                .build(),
        ),
        false => call,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_choice_has_its_own_token_of_at_most_64_characters() {
        let p5 = Choice {
            instance_type: "p5.48xlarge".into(),
            gpus: 8,
            subnet: Some("subnet-0123456789abcdef0".into()),
            reservation: None,
        };
        let p4 = Choice {
            instance_type: "p4d.24xlarge".into(),
            ..p5.clone()
        };
        let long = "x".repeat(80);
        let (a, b) = (choice_token(&long, &p5), choice_token(&long, &p4));
        assert_ne!(a, b);
        assert!(a.len() <= 64 && a.is_ascii(), "{a}");
        assert_eq!(
            choice_token("dt-replace-i-0a", &p5),
            choice_token("dt-replace-i-0a", &p5)
        );
    }
}
